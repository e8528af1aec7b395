"""The Triton wrapper's launch path without a GPU: Triton compiles for sm_90, the launch is real.

Triton compiles for a given target without a GPU, so these tests compile each kernel as its
``JITFunction`` would (its binder's specialisation, its ``_pack_args``, ``triton.compile``) for
``GPUTarget("cuda", 90, 32)`` and check the parameter layout the wrapper builds against the
compiled kernel's own PTX signature.  Then a subprocess whose ``libcuda.so.1`` is
tests/fake_libcuda.c runs the wrapper's real per-call path on "device" arrays: the compiled
cubin is loaded through ``interop_core.load_module`` (the fake hands out a function handle and
reports the PTX's parameter sizes as a driver would), and the test reads back the launch
configuration and every parameter byte the kernel would receive.  Skips without Triton.
"""

from __future__ import annotations

import re
import struct
import sys
from pathlib import Path

import pytest
from fake_driver import build, compiler, run

triton = pytest.importorskip("triton", reason="needs Triton (pip install triton)")
torch = pytest.importorskip("torch", reason="needs torch (Triton's kernels take its tensors)")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

import interop_core  # noqa: E402
from interop_core.launch import _triton, _triton_launch  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
HERE = Path(__file__).resolve().parent


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def mixed(out_ptr, big, huge, one, half: tl.float16, wide: tl.float64, flag, alpha, small,
          bias_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    value = (big + huge.to(tl.int64) + one + half.to(tl.int64) + wide.to(tl.int64)
             + flag.to(tl.int64) + alpha.to(tl.int64) + small)
    if bias_ptr is not None:
        value += tl.load(bias_ptr + offsets)
    tl.store(out_ptr + offsets, value)


def compile_for_sm90(jit, args, kwargs):
    """What ``jit[grid](*args, **kwargs)`` compiles, for sm_90, without a GPU."""
    kwargs = {"debug": False, **kwargs}
    binder = create_function_from_signature(jit.signature, jit.params, BACKEND)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(BACKEND, kwargs, bound,
                                                           specialization, options)
    return triton.compile(ASTSource(jit, signature, constexprs, attrs), target=TARGET,
                          options=options.__dict__)


def ptx_param_sizes(ptx: str) -> tuple[int, ...]:
    """The byte size of each parameter of the PTX's one ``.entry``."""
    params = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ptx, re.S).group(1)
    sizes = []
    for line in filter(None, (p.strip() for p in params.split(","))):
        bits = int(re.search(r"\.param\s+(?:\.align\s+\d+\s+)?\.[a-z]+?(\d+)", line).group(1))
        count = re.search(r"\[(\d+)\]", line)
        sizes.append(bits // 8 * (int(count.group(1)) if count else 1))
    return tuple(sizes)


LAYOUT_CASES = {
    "add, unaligned x, i32": (add, lambda: ((torch.zeros(64)[1:], torch.zeros(64),
                                             torch.zeros(64), 1000), {"BLOCK": 128})),
    "add, n == 1 (a constexpr)": (add, lambda: ((torch.zeros(64),) * 3 + (1,),
                                                {"BLOCK": 64, "num_warps": 2})),
    "every scalar type": (mixed, lambda: ((torch.zeros(16, dtype=torch.int64), 2 ** 40,
                                           2 ** 63 + 1, 1, 1.5, 2.0, True, 0.5, -3, None),
                                          {"BLOCK": 16})),
    "bias, clusters of 2": (mixed, lambda: ((torch.zeros(16, dtype=torch.int64), 5, 7, 3, 1.5,
                                             2.0, False, 0.5, 9,
                                             torch.zeros(16, dtype=torch.int64)),
                                            {"BLOCK": 16, "num_ctas": 2})),
}


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_the_layout_the_wrapper_builds_matches_the_compiled_kernels_ptx(case):
    kernel, make = LAYOUT_CASES[case]
    args, kwargs = make()
    compiled = compile_for_sm90(kernel, args, kwargs)
    fast = interop_core.triton_kernel(kernel)
    record = interop_core.launch_args(args)
    types, problem, _ = _triton.layout_of(fast, compiled, record)
    assert problem is None
    sizes = _triton_launch._storage_sizes(types) + (8, 8)     # + global and profile scratch
    assert sizes == ptx_param_sizes(compiled.asm["ptx"])
    # Constexpr-specialised arguments (None, an int equal to 1) are not passed.
    passed = [name for name, ty in zip(fast.runtime_names, types, strict=True)
              if ty != "constexpr"]
    assert len(passed) + 2 == len(sizes)


# -- the per-call path under a fake driver ------------------------------------------------------

S = 0x5000          # torch's "current stream" in these runs (a stream of device 0 in the fake)

SETUP = f"""
import ctypes, struct, sys
sys.path.insert(0, {str(HERE)!r})
import numpy as np
import triton
import interop_core
from interop_core import Buffer, StridedLayout, StridedMemoryView
from interop_core.launch import _triton, _triton_launch
import test_triton_launch_path as here

class Device:
    # "device memory" of device 0 (the fake's device memory is host memory)
    def __init__(self, values, dtype=np.float32, readonly=False):
        self.a = np.array(values, dtype)
        self.__cuda_array_interface__ = {{
            "shape": self.a.shape, "typestr": self.a.dtype.str,
            "data": (self.a.ctypes.data, readonly), "strides": None, "version": 3,
            "stream": None}}

def on_device_1(a):
    buffer = Buffer.from_handle(a.ctypes.data, a.nbytes, owner=a, device="cuda:1")
    return StridedMemoryView.from_buffer(buffer, StridedLayout.dense(a.shape, 4), np.float32)

def set_params(*sizes):
    _fake.fake_set_params((ctypes.c_longlong * max(len(sizes), 1))(*sizes), len(sizes))

def last_launch():
    config = (ctypes.c_ulonglong * 16)()
    params = ctypes.create_string_buffer(1024)
    n = _fake.fake_last_launch(config, params, 1024)
    return list(config), params.raw[:n]

def calls(log):
    return [name if arg is None else f"{{name}} {{arg:#x}}" for name, arg in log]

def launched(log):
    return [c for c in calls(log) if c.startswith("cuLaunchKernel")]

# Triton's compile (for sm_90: no GPU here) and load (the cubin through the fake driver, which
# then reports the PTX's parameter sizes), in place of the GPU's; everything else is the real
# path.  The process counts as validated; torch's current device and stream are 0 and S.
compiles, loaded, own = [], [], []
LAYOUT_OFFSET = [0]

def warmup(k, args, kwargs, grid):
    compiled = here.compile_for_sm90(k.fn, args, kwargs)
    compiles.append(k.name)
    sizes = list(here.ptx_param_sizes(compiled.asm["ptx"]))
    sizes[0] += LAYOUT_OFFSET[0]
    set_params(*sizes)
    return compiled

def load_function(compiled, device):
    kernel = interop_core.load_module(compiled.asm["cubin"], device).kernel(compiled.metadata.name)
    loaded.append(kernel)
    return kernel.handle

def own_launch(k, grid, args, kwargs, stream):
    own.append(k.name)

_triton._warmup = warmup
_triton._load_function = load_function
_triton._own_launch = own_launch
_triton._prepare = lambda k: _triton_launch._set_device_functions(k, lambda: 0, lambda d: {S})
_triton._state.update(mode="fast", reason="validated by the test")
_triton_launch._set_process_mode(1)
make_current(0)
x, y, out = Device(np.arange(64)), Device(np.ones(64)), Device(np.zeros(64))
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if not sys.platform.startswith("linux") or compiler() is None:
        pytest.skip("needs Linux and a C compiler to build the fake libcuda")
    return build(tmp_path_factory.mktemp("cuda13"))


def test_a_compiled_key_is_launched_with_one_driver_call_and_tritons_layout(driver):
    out = run(driver, SETUP + """
fast = interop_core.triton_kernel(here.add, writable=("out_ptr",))
result = fast[(3,)](x, y, out, 1000, BLOCK=128)
config, params = last_launch()
take_log()
again = fast[(3,)](x, y, out, 1000, BLOCK=128)
report({"again": calls(take_log()), "compiles": compiles, "config": config[:8],
         "params": list(struct.unpack("<QQQiQQ", params)), "result": again is result,
         "pointers": [x.a.ctypes.data, y.a.ctypes.data, out.a.ctypes.data],
         "name": result.metadata.name, "warps": result.metadata.num_warps})
""")
    assert out["compiles"] == ["add"]
    assert out["again"] == ["cuCtxGetCurrent", f"cuLaunchKernel {S:#x}"]
    assert out["config"] == [3, 1, 1, 32 * out["warps"], 1, 1, 0, S]
    # x, y, out, n as i32, then the global and profile scratch pointers (none needed here).
    assert out["params"] == out["pointers"] + [1000, 0, 0]
    assert out["result"] and out["name"] == "add"


def test_each_new_specialisation_is_compiled_once_and_a_grid_callable_gets_the_arguments(
        driver):
    out = run(driver, SETUP + """
fast = interop_core.triton_kernel(here.add)
grids = []
def grid(meta):
    grids.append(sorted(meta))
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)
for n in (1000, 1000, 1024, 2000, 1024):       # 1024 is divisible by 16: another kernel
    fast[grid](x, y, out, n, BLOCK=128)
config, _ = last_launch()
report({"compiles": compiles, "grids": grids[0], "x": config[0], "size": fast.cache_size})
""")
    assert out["compiles"] == ["add", "add"]
    assert out["size"] == 2
    assert out["grids"] == ["BLOCK", "n", "out_ptr", "x_ptr", "y_ptr"]
    assert out["x"] == 8                           # cdiv(1024, 128)


def test_every_scalar_type_and_clusters_reach_the_kernel_as_triton_passes_them(driver):
    out = run(driver, SETUP + """
fast = interop_core.triton_kernel(here.mixed)
wide_out, bias = Device(np.zeros(16), np.int64), Device(np.zeros(16), np.int64)
fast[(5,)](wide_out, 2 ** 40, 2 ** 63 + 1, 1, 1.5, 2.0, True, 0.5, -3, None, BLOCK=16)
plain, plain_params = last_launch()
fast[(5, 2)](wide_out, 5, 7, 3, -0.25, 2.0, False, 0.5, 9, bias, BLOCK=16, num_ctas=2,
             num_warps=2)
cluster, cluster_params = last_launch()
report({"launches": launched(take_log()), "plain": plain, "cluster": cluster,
        "plain_params": plain_params.hex(), "cluster_params": cluster_params.hex(),
        "out": wide_out.a.ctypes.data, "bias": bias.a.ctypes.data})
""")
    assert out["launches"] == [f"cuLaunchKernel {S:#x}", f"cuLaunchKernelEx {S:#x}"]
    # out, big (i64), huge (u64), fp16 1.5, fp64 2.0, u1, fp32 0.5, i32 -3; `one` (1) and
    # bias (None) are constexprs; then the two scratch pointers.
    plain = struct.unpack("<QqQHdBfiQQ", bytes.fromhex(out["plain_params"]))
    assert plain == (out["out"], 2 ** 40, 2 ** 63 + 1, 0x3E00, 2.0, 1, 0.5, -3, 0, 0)
    assert out["plain"][:8] == [5, 1, 1, 128, 1, 1, 0, S]
    # Small ints are i32 now, one (3) is passed, and the bias pointer; fp16 -0.25 is 0xB400.
    clustered = struct.unpack("<QiiiHdBfiQQQ", bytes.fromhex(out["cluster_params"]))
    assert clustered == (out["out"], 5, 7, 3, 0xB400, 2.0, 0, 0.5, 9, out["bias"], 0, 0)
    config = out["cluster"]
    assert config[:8] == [10, 2, 1, 64, 1, 1, 0, S]  # grid x times num_ctas; 2 warps
    assert config[8:13] == [2, 4, 2 | (1 << 32), 5, 1]   # cluster (2, 1, 1), spread


def test_bad_calls_are_refused_before_anything_is_launched(driver):
    out = run(driver, SETUP + """
fast = interop_core.triton_kernel(here.add, writable=("out_ptr",))
fast[(1,)](x, y, out, 64, BLOCK=64)
take_log()
errors = []
for call in (lambda: fast[(1,)](on_device_1(x.a), y, out, 64, BLOCK=64),
             lambda: fast[(1,)](x, np.ones(64, np.float32), out, 64, BLOCK=64),
             lambda: fast[(1,)](x, y, Device(np.zeros(64), readonly=True), 64, BLOCK=64),
             lambda: fast[(1, 65536)](x, y, out, 64, BLOCK=64),
             lambda: fast[(-1,)](x, y, out, 64, BLOCK=64),
             lambda: fast[(1.5,)](x, y, out, 64, BLOCK=64),
             lambda: fast.run(x, y, out, 64, BLOCK=64, grid=(1,), stream=0x15000)):
    try:
        call()
        errors.append("launched")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
empty = fast[(0,)](x, y, out, 64, BLOCK=64)
report({"errors": errors, "launched": launched(take_log()), "empty": empty is not None})
""")
    assert out["launched"] == []          # and an empty grid launches nothing, as in Triton
    assert out["empty"]
    errors = out["errors"]
    assert errors[0] == ("ValueError: add: argument 'x_ptr' "
                         "(interop_core.core._view.StridedMemoryView) is on cuda:1, but the "
                         "launch goes to cuda:0 (torch's current device)")
    assert errors[1] == ("ValueError: add: argument 'y_ptr' (numpy.ndarray) is in cpu:0 memory, "
                         "which a Triton kernel cannot address")
    assert errors[2] == ("BufferError: add: argument 'out_ptr' (__main__.Device) is read-only, "
                         "but the kernel writes it")
    assert errors[3].startswith("ValueError: add: grid (1, 65536) (x 1 CTAs per cluster in x) "
                                "is beyond cuda:0's limits")
    assert errors[4] == "ValueError: grid[0] must be between 0 and 2**32 - 1, got -1"
    assert errors[5] == "TypeError: grid[0] must be an int, got float"
    assert errors[6] == ("ValueError: add: the stream 0x15000 does not belong to cuda:0, the "
                         "current device")


def test_launch_hooks_send_calls_to_tritons_own_launch(driver):
    out = run(driver, SETUP + """
fast = interop_core.triton_kernel(here.add)
fast[(1,)](x, y, out, 64, BLOCK=64)
hook = lambda metadata: None
triton.knobs.runtime.launch_enter_hook.add(hook)
fast[(1,)](x, y, out, 64, BLOCK=64)
triton.knobs.runtime.launch_enter_hook.remove(hook)
fast[(1,)](x, y, out, 64, BLOCK=64)
report({"own": own, "launches": launched(take_log())})
""")
    assert out["own"] == ["add"]          # a profiler listening: Triton launches (and calls it)
    assert out["launches"] == [f"cuLaunchKernel {S:#x}"] * 2


def test_a_layout_the_driver_contradicts_sends_the_process_to_tritons_own_launch(driver):
    out = run(driver, SETUP + """
LAYOUT_OFFSET[0] = 8          # the "driver" reports a first parameter of 16 bytes
fast = interop_core.triton_kernel(here.add)
fast[(1,)](x, y, out, 64, BLOCK=64)
fast[(1,)](x, y, out, 128, BLOCK=64)
report({"own": own, "launches": launched(take_log()), "status": _triton.status()})
""")
    assert out["own"] == ["add", "add"]
    assert out["launches"] == []
    assert out["status"]["mode"] == "fallback"
    assert "differs from what the driver reports" in out["status"]["reason"]


def test_a_triton_version_with_an_unknown_layout_uses_tritons_own_launch(driver):
    out = run(driver, SETUP + """
_triton.KNOWN_LAYOUTS = ("2.0",)
fast = interop_core.triton_kernel(here.add)
fast[(1,)](x, y, out, 64, BLOCK=64)
report({"own": own, "always": fast.always_own, "status": _triton.status(),
        "launches": launched(take_log())})
""")
    assert out["own"] == ["add"] and out["always"] and out["launches"] == []
    status = out["status"]
    assert status["mode"] == "fallback" and not status["layout_known"]
    assert status["reason"] == (f"Triton {triton.__version__}: its compiled-kernel layout is not "
                                "known to interop-core (known: 2.0); every launch is Triton's own")
