"""Readers that read a framework's raw object memory stay inside the objects.

The torch reader finds the fields it reads by scanning TensorImpl objects of canary tensors
(``interop_torch._reader.prepare``).  Each test runs that scan in a subprocess whose malloc
(tests/guard_malloc.c, preloaded) puts every object of a TensorImpl's size range against an
inaccessible page: a read past an object's end is a segmentation fault there, not a read of the
neighbouring allocation that goes unnoticed (AddressSanitizer finds the same in
scripts/sanitize.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "guard_malloc.c"

_PROBE = """
import ctypes, json, os, sys
import torch
import interop_core
from interop_torch import _reader

guard = ctypes.CDLL(os.environ["GUARD_MALLOC"])
guard.guard_malloc_count.restype = ctypes.c_size_t
# Objects of 96..1024 bytes: TensorImpl (176 bytes on torch 2.13), StorageImpl and their
# neighbours, whatever this torch's sizes are.
guard.guard_malloc_arm(ctypes.c_size_t(96), ctypes.c_size_t(1024))
details = _reader.prepare()
guard.guard_malloc_disarm()
t = torch.arange(6.0).reshape(2, 3)[:, 1:]
v = interop_core.view(t)
print("RESULT " + json.dumps({
    "details": details if isinstance(details, dict) else str(details),
    "guarded": guard.guard_malloc_count(),
    "asan": "libasan" in os.environ.get("LD_PRELOAD", ""),
    "view": [v.ptr == t.data_ptr(), list(v.shape), list(v.strides)],
}))
"""


@pytest.fixture(scope="module")
def guard_library(tmp_path_factory):
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc / gcc) to build tests/guard_malloc.c")
    library = tmp_path_factory.mktemp("guard") / "guard_malloc.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(SOURCE)],
                   check=True)
    return library


def test_torch_reader_validation_reads_nothing_past_a_tensorimpl(guard_library):
    pytest.importorskip("torch")
    env = dict(os.environ)
    env["GUARD_MALLOC"] = str(guard_library)
    # After a sanitizer runtime already there (scripts/sanitize.sh): that one must come first.
    env["LD_PRELOAD"] = " ".join(filter(None, (env.get("LD_PRELOAD"), str(guard_library))))
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, (str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH"))))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(_PROBE)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (
        f"the validation process died (exit status {run.returncode}; -11 is a read past an "
        f"object):\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    result = json.loads(run.stdout.split("RESULT ", 1)[1])
    # The guard was in force (AddressSanitizer's malloc takes its place when preloaded first).
    assert result["guarded"] > 0 or result["asan"]
    assert isinstance(result["details"], dict), result["details"]
    assert result["details"]["keyset_offset"] is not None
    assert result["view"] == [True, [2, 2], [3, 1]]
