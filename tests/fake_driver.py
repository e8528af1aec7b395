"""Run Python code against tests/fake_libcuda.c instead of the real CUDA driver.

interop_core opens ``libcuda.so.1`` itself (``dlopen``), so a subprocess whose
``LD_LIBRARY_PATH`` starts with a folder holding the fake is a process "with a CUDA driver": the
package is not changed or patched in any way.  The fake logs every driver call; ``run`` hands the
code a ``take_log()`` that returns the calls since the last one as ``[(name, argument), ...]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_libcuda.c")

_PRELUDE = """
import ctypes, json
_fake = ctypes.CDLL("libcuda.so.1")

def take_log():
    out = ctypes.create_string_buffer(1 << 16)
    _fake.fake_take_log(out, len(out))
    calls = []
    for line in out.value.decode().splitlines():
        name, _, arg = line.partition(" ")
        calls.append((name, int(arg)) if arg else (name, None))
    return calls

def make_current(device):
    _fake.fake_make_current(device)

def report(value):
    print("FAKE-DRIVER-RESULT " + json.dumps(value))
"""


def compiler() -> str | None:
    """A C compiler, or None (the tests that need one skip)."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def build(folder: Path, *, stream_get_device: bool = True) -> Path:
    """Compile the fake into ``folder/libcuda.so.1``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    flags = [] if stream_get_device else ["-DFAKE_NO_STREAM_GET_DEVICE"]
    subprocess.run([compiler(), "-shared", "-fPIC", "-O1", *flags, "-o",
                    str(folder / "libcuda.so.1"), str(SOURCE)], check=True)
    return folder


def run(folder: Path, code: str):
    """Run ``code`` (which calls ``report(value)`` once) with the fake driver; returns value."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(folder), env.get("LD_LIBRARY_PATH")) if p)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), str(root / "plugins"), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"the fake-driver process failed:\n{done.stdout}\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith("FAKE-DRIVER-RESULT "):
            return json.loads(line.split(" ", 1)[1])
    raise AssertionError(f"the fake-driver process reported nothing:\n{done.stdout}")
