"""Shared fixtures and the `gpu` marker: GPU tests skip cleanly where no CUDA device exists."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_probe import cuda_device_count

# jax reads XLA_FLAGS once, when its CPU backend starts (at the first array, not at import):
# set here, before any test runs, it gives every test four jax CPU devices, so the sharded-array
# tests get real multi-device jax arrays on any machine.  Everything else keeps using the first
# device, jax's default.  A device count the caller set already is left alone.
_HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _HOST_DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_HOST_DEVICES_FLAG}=4".strip()

import interop_core  # noqa: E402  (after XLA_FLAGS, though it imports no jax itself)


class InterfaceThatRaises:
    """A producer whose interface properties raise ``error`` (torch's CUDA Array Interface
    raises ``KeyError`` for float8 tensors, ``RuntimeError`` for tensors that require grad)."""

    def __init__(self, error):
        self.error = error

    @property
    def __cuda_array_interface__(self):
        raise self.error

    @property
    def __array_interface__(self):
        raise self.error


def pytest_collection_modifyitems(config, items):
    devices = cuda_device_count()
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: no libcuda or no device)")
    skip_two = pytest.mark.skip(reason=f"needs two CUDA GPUs (found {devices})")
    for item in items:
        if devices == 0 and "gpu" in item.keywords:
            item.add_marker(skip)
        elif devices < 2 and "multi_gpu" in item.keywords:
            item.add_marker(skip_two)


# `python -m interop_core doctor --import` imports every installed framework and validates every
# fast reader: seconds per run.  One run, in a fresh interpreter as a user runs it, serves every
# test of its report: the JSON, the table, and the modules it left imported.
_DOCTOR_IMPORT = """
import contextlib, io, json, sys
from interop_core.__main__ import main
report = {}
for name, args in (("json", ["doctor", "--import", "--json"]), ("text", ["doctor", "--import"])):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(args)
    assert not status, f"{args} exited with {status}: {out.getvalue()}"
    report[name] = out.getvalue()
report["modules"] = sorted(sys.modules)
print(json.dumps(report))
"""


@pytest.fixture(scope="session")
def doctor_import():
    """What ``python -m interop_core doctor --import`` reports, run once in a fresh interpreter.

    A dict: ``json`` (the ``--json`` report, parsed), ``text`` (the table) and ``modules`` (the
    modules imported once both had run).  This tree's first-party plugins, as the test process
    imports them; plugin discovery on whatever the caller's environment says.
    """
    root = Path(__file__).resolve().parent.parent
    env = {key: value for key, value in os.environ.items()
           if key != "INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "plugins")])
    out = subprocess.run([sys.executable, "-c", _DOCTOR_IMPORT], capture_output=True, text=True,
                         env=env, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    return {"json": json.loads(report["json"]), "text": report["text"],
            "modules": set(report["modules"])}


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


@pytest.fixture
def force_validation():
    """Pin a validated reader's result for one test: ``force_validation("numpy:ndarray", False)``.

    Goes through the core's one validation mechanism (private); every pin is lifted afterwards.
    """
    from interop_core.registry import _validation

    pinned = []

    def force(type_path, ok, reason="forced by the test"):
        pinned.append(type_path)
        _validation._force(type_path, ok, reason)

    yield force
    for type_path in pinned:
        _validation._force(type_path, None)


def validation_result(type_path, kind="reader"):
    """The core's validation result for the reader (``kind="shards"``: the sharded path) of
    ``type_path``, validating it if needed."""
    from interop_core.registry import _validation
    from interop_core.shards import _shards

    module, _, qualname = type_path.partition(":")
    import importlib

    t = importlib.import_module(module)
    for part in qualname.split("."):
        t = getattr(t, part)
    interop_core.plugins.reader_for(t)
    if kind == "shards":
        _shards.sharded_entry_for(t)     # a sharded path validates on first use
    found = [r for r in _validation.results() if r.type_path == type_path and r.kind == kind]
    assert found, f"no validation ran for {type_path}"
    return found[-1]


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


@pytest.fixture(params=["c_api", "python"])
def numpy_export_path(request):
    """Both paths of the numpy plugin's compiled exporter: numpy's C API, and the Python path
    (np.asarray) it takes for a numpy whose C ABI it does not know (pinned here, privately)."""
    pytest.importorskip("numpy")
    from interop_numpy import _export

    if request.param == "python":
        _export._force_python_path("simulated by the test")
    try:
        yield request.param
    finally:
        _export._force_python_path(None)
