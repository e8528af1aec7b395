"""Shared fixtures and the `gpu` marker: GPU tests skip cleanly where no CUDA device exists."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from cuda_probe import cuda_device_count

import interop_core


def pytest_collection_modifyitems(config, items):
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: no libcuda or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def make_plugin(declare):
    """A plugin object whose hook runs `declare(registry)`."""

    class Plugin:
        @interop_core.hookimpl
        def interop_core_register(self, registry):
            declare(registry)

    return Plugin()


@pytest.fixture
def registered():
    """Register plugins by hand for one test; every one is unregistered afterwards."""
    names = []

    def register(declare, name):
        names.append(interop_core.register_plugin(make_plugin(declare), name=name))
        return names[-1]

    yield register
    for name in reversed(names):
        if any(info.name == name for info in interop_core.plugin_status()):
            interop_core.unregister_plugin(name)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="session")
def c_library(tmp_path_factory):
    """``examples/axpy.c`` built with the system's C compiler and loaded through ctypes."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc / gcc) on this machine to build examples/axpy.c")
    library = tmp_path_factory.mktemp("axpy") / "libaxpy.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library),
                    str(EXAMPLES / "axpy.c")], check=True)
    lib = ctypes.CDLL(str(library))
    for name in ("axpy_pointers", "axpy_params"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = None
    return lib
