"""The public launch (``load_module``, ``Module.kernel``, ``Kernel.launch``), on any machine.

Each test runs in a subprocess whose ``libcuda.so.1`` is tests/fake_libcuda.c (see
tests/fake_driver.py): the exact driver calls of a launch are listed, the bytes the kernel
would receive are read back, and every bad input is refused before ``cuLaunchKernel``.  The
launch of a real PTX kernel on a GPU is in tests/test_launch_gpu.py.
"""

from __future__ import annotations

import sys

import pytest
from fake_driver import build, compiler, run

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or compiler() is None,
    reason="needs Linux and a C compiler to build the fake libcuda")

S = 0x5000          # a stream of device 0 in the fake
FOREIGN = 0x15000   # a stream of device 1

SETUP = r"""
import ctypes, struct
import numpy as np
from interop_core import Buffer, StridedLayout, StridedMemoryView, launch_args, load_module

class Device:
    # float32 "device memory" of device 0 (the fake's device memory is host memory)
    def __init__(self, values, readonly=False):
        self.a = np.array(values, np.float32)
        self.__cuda_array_interface__ = {
            "shape": self.a.shape, "typestr": "<f4", "data": (self.a.ctypes.data, readonly),
            "strides": None, "version": 3, "stream": None}

def on_device_1(a):
    buffer = Buffer.from_handle(a.ctypes.data, a.nbytes, owner=a, device="cuda:1")
    return StridedMemoryView.from_buffer(buffer, StridedLayout.dense(a.shape, 4), np.float32)

def set_params(*sizes):
    _fake.fake_set_params((ctypes.c_longlong * max(len(sizes), 1))(*sizes), len(sizes))

def forget_params():
    _fake.fake_set_params(None, -1)       # a driver that cannot report parameter sizes

def last_launch():
    config = (ctypes.c_ulonglong * 16)()
    params = ctypes.create_string_buffer(1024)
    n = _fake.fake_last_launch(config, params, 1024)
    return list(config), params.raw[:n]

def calls(log):
    return [name if arg is None else f"{name} {arg:#x}" for name, arg in log]

def launched(log):
    return [c for c in calls(log) if c.startswith("cuLaunchKernel")]

make_current(0)
set_params(8, 8, 8, 4, 8)        # axpy_f32: out, x, y, float a, int64 n
module = load_module(".version 7.0\n.target sm_52\n.address_size 64\n")
kernel = module.kernel("axpy_f32")
out, x, y = Device([0.0] * 4), Device([1, 2, 3, 4]), Device([5, 6, 7, 8])
TYPES = (None, None, None, "float32", "int64")
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda13"))


def test_a_launch_passes_each_argument_as_its_parameter_takes_it(driver):
    out = run(driver, SETUP + f"""
record = launch_args((out, x, y, 2.5, 4), {S}, scalar_types=TYPES, writable=(0,))
kernel.launch((3, 2), (128, 2), record, shared_mem=1024)
config, params = last_launch()
p = struct.unpack("<QQQfq", params)
report({{"config": config[:8], "params": [p[0] == out.a.ctypes.data, p[1] == x.a.ctypes.data,
        p[2] == y.a.ctypes.data, p[3], p[4]]}})
""")
    assert out["config"] == [3, 2, 1, 128, 2, 1, 1024, S]
    assert out["params"] == [True, True, True, 2.5, 4]


def test_a_launch_makes_one_driver_call_once_the_device_limits_and_stream_are_known(driver):
    out = run(driver, SETUP + f"""
record = launch_args((out, x, y, 2.5, 4), {S}, scalar_types=TYPES)
take_log()
kernel.launch(1, 256, record)
first = calls(take_log())
kernel.launch(1, 256, record)
report({{"first": first, "again": calls(take_log())}})
""")
    # Limits asked once per device (grid, block, threads, shared, clusters, cooperative), the
    # stream's device once per stream; afterwards the launch alone (the context is current).
    assert out["first"][-3:] == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent",
                                 f"cuLaunchKernel {S:#x}"]
    assert sum(c.startswith("cuDeviceGetAttribute") for c in out["first"]) == 10
    assert out["again"] == ["cuCtxGetCurrent", f"cuLaunchKernel {S:#x}"]


def test_a_cluster_launch_goes_through_cuLaunchKernelEx_with_the_cluster_attribute(driver):
    out = run(driver, SETUP + f"""
record = launch_args((out, x, y, 2.5, 4), {S}, scalar_types=TYPES)
kernel.launch((4, 2), 64, record, cluster=(2, 1))
config, params = last_launch()
report({{"calls": launched(take_log()), "config": config}})
""")
    assert out["calls"] == [f"cuLaunchKernelEx {S:#x}"]
    config = out["config"]
    assert config[:8] == [4, 2, 1, 64, 1, 1, 0, S]
    assert config[8] == 1                               # one attribute:
    assert config[9] == 4                               # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert config[10] == 2 | (1 << 32)                  # x = 2, y = 1 (z in the next word)


def test_more_than_48_kib_of_dynamic_shared_memory_is_allowed_once_per_size(driver):
    out = run(driver, SETUP + f"""
record = launch_args((out, x, y, 2.5, 4), {S}, scalar_types=TYPES)
kernel.launch(1, 32, record)
take_log()
kernel.launch(1, 32, record, shared_mem=100_000)
kernel.launch(1, 32, record, shared_mem=90_000)
report(calls(take_log()))
""")
    assert out == ["cuCtxGetCurrent", "cuFuncSetAttribute 0x186a0", "cuCtxGetCurrent",
                   f"cuLaunchKernel {S:#x}", "cuCtxGetCurrent", f"cuLaunchKernel {S:#x}"]


def test_modules_load_from_ptx_text_bytes_a_cubin_and_a_file(driver, tmp_path):
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(b"\x7fELF" + bytes(60))
    out = run(driver, SETUP + f"""
import pathlib
take_log()
kinds = [load_module(".version 7.0\\n").kind, load_module(b".version 7.0\\n").kind,
         load_module(pathlib.Path({str(cubin)!r})).kind,
         load_module(b"\\x7fELF" + bytes(60), 1).device_id]
report({{"kinds": kinds, "loads": [c for c in calls(take_log()) if "Load" in c]}})
""")
    assert out["kinds"] == ["ptx", "ptx", "binary", 1]
    # The fake logs 1 for an image starting with the ELF magic: binaries go to the driver as is.
    assert out["loads"] == ["cuModuleLoadDataEx 0x0", "cuModuleLoadDataEx 0x0",
                            "cuModuleLoadDataEx 0x1", "cuModuleLoadDataEx 0x1"]


def test_images_the_driver_rejects_and_missing_kernels_are_value_errors(driver):
    out = run(driver, SETUP + """
errors = []
for make in (lambda: load_module("bad ptx"), lambda: module.kernel("missing_kernel"),
             lambda: load_module(b"neither\\0ptx"), lambda: load_module(42),
             lambda: load_module("x", -1)):
    try:
        make()
    except (TypeError, ValueError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
report(errors)
""")
    assert out[0].startswith("ValueError: CUDA driver call cuModuleLoadDataEx failed")
    assert out[0].endswith("ptxas fatal: fake syntax error")
    assert out[1].startswith("ValueError: the module has no kernel named 'missing_kernel'")
    assert "neither a cubin (ELF), a fatbin nor PTX text" in out[2]
    assert out[3].startswith("TypeError: image must be PTX text (str), an image (bytes)")
    assert out[4] == "ValueError: device must be >= 0, got -1"


BAD_LAUNCHES = {
    "grid-zero": ("kernel.launch((0,), 32, ok)", "ValueError",
                  "grid[0] must be between 1 and 2147483647 (cuda:0's "
                  "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), got 0"),
    "grid-beyond-limit": ("kernel.launch((1, 65536), 32, ok)", "ValueError",
                          "grid[1] must be between 1 and 65535"),
    "block-too-many-threads": ("kernel.launch(1, (64, 32), ok)", "ValueError",
                               "has 2048 threads, beyond cuda:0's limit of 1024"),
    "shared-beyond-optin": ("kernel.launch(1, 32, ok, shared_mem=300_000)", "ValueError",
                            "shared_mem is 300000 bytes; cuda:0 allows 0 to 232448"),
    "cluster-not-dividing": ("kernel.launch(3, 32, ok, cluster=2)", "ValueError",
                             "grid[0] (3) is not a multiple of cluster[0] (2)"),
    "not-a-record": ("kernel.launch(1, 32, (out, x, y, 2.5, 4))", "TypeError",
                     "args must be a LaunchArgs record"),
    "no-stream": ("kernel.launch(1, 32, launch_args((out, x, y, 2.5, 4), scalar_types=TYPES))",
                  "ValueError", "the record has no stream"),
    "too-few-arguments": (f"kernel.launch(1, 32, launch_args((out, x, y, 2.5), {S}, "
                          "scalar_types=TYPES[:4]))", "TypeError",
                          "takes 5 parameters (the driver says), but the record has 4"),
    "float64-for-a-float-parameter": (f"kernel.launch(1, 32, launch_args((out, x, y, 2.5, 4), "
                                      f"{S}))", "TypeError",
                                      "argument 3 (float) is a scalar stored as float64 "
                                      "(8 bytes), but the kernel's parameter 3 takes 4 bytes"),
    "array-on-another-device": (f"kernel.launch(1, 32, launch_args((out, on_device_1(x.a), y, "
                                f"2.5, 4), {S}, scalar_types=TYPES))", "ValueError",
                                "argument 1 (interop_core.core._view.StridedMemoryView) is on "
                                "cuda:1, but the kernel is loaded on cuda:0"),
    "host-array": (f"kernel.launch(1, 32, launch_args((np.zeros(4, np.float32), x, y, 2.5, 4), "
                   f"{S}, scalar_types=TYPES))", "ValueError",
                   "argument 0 (numpy.ndarray) is in cpu:0 memory"),
    "stream-of-another-device": (f"kernel.launch(1, 32, launch_args((out, x, y, 2.5, 4), "
                                 f"{FOREIGN}, scalar_types=TYPES))", "ValueError",
                                 f"the record's stream {FOREIGN:#x} belongs to cuda:1"),
    "read-only-output": (f"kernel.launch(1, 32, launch_args((Device([0.0], readonly=True), x, "
                         f"y, 2.5, 4), {S}, scalar_types=TYPES, writable=(0,)))", "BufferError",
                         "argument 0 (__main__.Device) is read-only, but writable arguments were asked"),
}


@pytest.mark.parametrize("case", list(BAD_LAUNCHES))
def test_bad_launches_are_refused_before_the_driver_launches_anything(driver, case):
    code, error, message = BAD_LAUNCHES[case]
    out = run(driver, SETUP + f"""
ok = launch_args((out, x, y, 2.5, 4), {S}, scalar_types=TYPES)
take_log()
try:
    {code}
    outcome = "launched"
except Exception as exc:
    outcome = f"{{type(exc).__name__}}: {{exc}}"
report({{"outcome": outcome, "launched": launched(take_log())}})
""")
    assert out["launched"] == []
    assert out["outcome"].startswith(f"{error}: "), out["outcome"]
    assert message in out["outcome"]


def test_a_declared_signature_is_checked_against_the_driver_and_every_record(driver):
    out = run(driver, SETUP + f"""
errors = []
declared = module.kernel("axpy_f32", ("pointer", "pointer", "pointer", "float32", "int64"))
for make in (lambda: module.kernel("axpy_f32", ("pointer",) * 3 + ("float64", "int64")),
             lambda: module.kernel("axpy_f32", ("pointer",) * 4),
             lambda: module.kernel("axpy_f32", ("pointer", "float")),
             lambda: declared.launch(1, 32, launch_args((out, x, y, 2.5, 4.0), {S},
                                                        scalar_types=(None,) * 3 + ("float32",
                                                                                    "float64"))),
             lambda: declared.launch(1, 32, launch_args((out, x, 1, 2.5, 4), {S},
                                                        scalar_types=TYPES))):
    try:
        make()
        errors.append("accepted")
    except (TypeError, ValueError) as exc:
        errors.append(f"{{type(exc).__name__}}: {{exc}}")
forget_params()
unknown = module.kernel("axpy_f32")
report({{"errors": errors, "signature": declared.signature, "sizes": declared.param_sizes,
        "unknown": unknown.param_sizes}})
""")
    assert out["signature"] == ["pointer", "pointer", "pointer", "float32", "int64"]
    assert out["sizes"] == [8, 8, 8, 4, 8]
    assert out["unknown"] is None
    errors = out["errors"]
    assert errors[0] == ("ValueError: kernel 'axpy_f32': signature[3] is 'float64' (8 bytes), "
                         "but the driver reports a parameter of 4 bytes")
    assert errors[1] == ("ValueError: kernel 'axpy_f32': the declared signature has 4 "
                         "parameters, but the driver reports 5")
    assert errors[2].startswith("TypeError: signature[1] must be 'pointer' or one of")
    assert errors[3] == ("TypeError: kernel 'axpy_f32': argument 4 (float) is a scalar stored "
                         "as float64 (8 bytes), but the parameter is int64 (pass scalar_types= "
                         "to launch_args)")
    assert errors[4] == ("TypeError: kernel 'axpy_f32': argument 2 (int) is a scalar, but the "
                         "parameter is a pointer")


def test_the_launch_timing_script_runs_or_says_why_not():
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(root), str(root / "plugins"), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "triton_launch.py"),
                           "--rounds", "1"], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    if not done.stdout.startswith("skipped: "):
        # On a GPU with torch and Triton: both Triton groups and the public launch, each path
        # with its ratio to the reference.
        for title in ("Triton kernel, 4 arguments", "Triton kernel, 16 arguments",
                      "public launch of a PTX kernel"):
            assert title in done.stdout
        assert "interop_core triton_kernel (torch)" in done.stdout
        assert "interop_core Kernel.launch" in done.stdout


def test_parameters_are_counted_without_a_failing_driver_call(driver):
    out = run(driver, SETUP + """
take_log()
set_params(8, 8, 4)
k = module.kernel("three_params")
report({"sizes": k.param_sizes, "calls": calls(take_log())})
""")
    assert out["sizes"] == [8, 8, 4]
    assert not [c for c in out["calls"] if "past the last" in c]
