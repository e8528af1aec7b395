"""The type stubs beside the compiled modules say what those modules hold (mypy's stubtest).

A ``.pyi`` stub is all a type checker or an IDE sees of a compiled module, so a stub that lists a
name the module lacks, or misses one it has, misleads every user who reads types.  stubtest
imports each compiled module and compares it with its stub; what it cannot check for Cython
classes is listed, with the reason, in ``stubtest_allowlist.txt``.  Skips without mypy (in the
``test`` extra).
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy.stubtest", reason="needs mypy (pip install 'interop-core[test]')")

ALLOWLIST = Path(__file__).with_name("stubtest_allowlist.txt")
# The distribution's packages: the core and its first-party plugins.
PACKAGES = ("interop_core", "interop_numpy", "interop_torch", "interop_cupy", "interop_numba",
            "interop_jax", "interop_cuda_core")


def _compiled_modules() -> tuple[list[str], list[str]]:
    """The dotted names of every compiled module, and the folders their packages lie in."""
    modules, roots = [], []
    for name in PACKAGES:
        package_dir = Path(__import__(name).__file__).parent
        roots.append(str(package_dir.parent))
        for path in sorted(package_dir.rglob("*")):
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                if path.name.endswith(suffix):
                    relative = path.relative_to(package_dir.parent)
                    dotted = ".".join(relative.parts)[: -len(suffix)]
                    modules.append(dotted)
                    break       # '.so' ends '.cpython-311-x86_64-linux-gnu.so' too
    return modules, list(dict.fromkeys(roots))


def test_every_compiled_module_matches_its_type_stub(tmp_path):
    modules, roots = _compiled_modules()
    assert len(modules) >= 30, f"found only {modules}"
    env = dict(os.environ, MYPYPATH=os.pathsep.join(roots),
               PYTHONPATH=os.pathsep.join(roots + [os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *modules, "--allowlist", str(ALLOWLIST)],
        cwd=tmp_path,  # mypy writes its cache into the working folder
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
