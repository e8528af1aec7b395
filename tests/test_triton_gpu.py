"""The Triton wrapper on a GPU: its results equal Triton's own launch, from every framework.

Each test runs a kernel through ``interop_core.triton_kernel(kernel)[grid](...)`` and through
Triton's own ``kernel[grid](...)`` on torch tensors holding the same inputs, into separate
outputs, and compares them bit for bit: several dtypes, integer specialisations (equal to 1,
divisible by 16, 64-bit), floats, bools, ``None``, constexprs (ints and dtypes), a grid
callable, launch options, a kernel with global scratch memory, an autotuned kernel, and inputs
from cupy, jax and numba.  Marked ``gpu``; skips without Triton or a CUDA torch.
"""

from __future__ import annotations

import numpy as np
import pytest

triton = pytest.importorskip("triton", reason="needs Triton (pip install triton)")
torch = pytest.importorskip("torch", reason="needs torch (Triton's kernels take its tensors)")
import triton.language as tl  # noqa: E402

import interop_core  # noqa: E402
from interop_core.launch import _triton, _triton_launch  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit(do_not_specialize=["n"])
def axpby(x_ptr, y_ptr, out_ptr, n, alpha, beta, flip, bias_ptr, BLOCK: tl.constexpr = 256):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = alpha * tl.load(x_ptr + offsets, mask=mask) + beta * tl.load(y_ptr + offsets,
                                                                          mask=mask)
    if flip:
        value = -value
    if bias_ptr is not None:
        value += tl.load(bias_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, value, mask=mask)


@triton.jit
def gather(src_ptr, dst_ptr, n, stride, offset, OUT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(src_ptr + offsets * stride, mask=mask)
    tl.store(dst_ptr + offsets, (value + offset).to(OUT), mask=mask)


@triton.jit
def tile_copy(src_ptr, dst_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # A device-side tensor descriptor: Triton asks for global scratch memory at launch.
    desc = tl.make_tensor_descriptor(src_ptr, shape=[M, N], strides=[N, 1],
                                     block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    tile = desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N])
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(dst_ptr + rows * N + cols, tile, mask=(rows < M) & (cols < N))


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})],
                 key=["n"])
@triton.jit
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def _same(ours, theirs):
    torch.cuda.synchronize()
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("n", [1, 16, 1000, 4096])
def test_add_equals_tritons_own_launch(dtype, n):
    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    x = (torch.randn(n, device="cuda") * 100).to(dtype)
    y = (torch.randn(n, device="cuda") * 100).to(dtype)
    ours, theirs = torch.zeros_like(x), torch.zeros_like(x)
    grid = (triton.cdiv(n, 128),)
    result = fast[grid](x, y, ours, n, BLOCK=128)
    add[grid](x, y, theirs, n, BLOCK=128)
    _same([ours], [theirs])
    assert result.metadata.name == "add"
    assert _triton.status()["mode"] == "fast", _triton.status()["reason"]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("scalars", [(1.5, -0.25), (2, 3), (0.0, 1.0)])
def test_floats_bools_none_and_do_not_specialize_equal_tritons(bias, flip, scalars):
    fast = interop_core.triton_kernel(axpby)
    n = 3000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda") if bias else None
    ours, theirs = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")

    def grid(meta):
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    fast[grid](x, y, ours, n, *scalars, flip, b)
    axpby[grid](x, y, theirs, n, *scalars, flip, b)
    _same([ours], [theirs])


@pytest.mark.parametrize("stride", [1, 2, 16, 17])
@pytest.mark.parametrize("offset", [0, 3, 2 ** 40])
@pytest.mark.parametrize("out", ["int64", "float32", "float16"])
def test_integer_specialisations_and_constexpr_dtypes_equal_tritons(stride, offset, out):
    fast = interop_core.triton_kernel(gather)
    n = 777
    src = torch.arange(n * stride, device="cuda", dtype=torch.int64)
    out_dtype = getattr(torch, out)
    ours = torch.zeros(n, device="cuda", dtype=out_dtype)
    theirs = torch.zeros_like(ours)
    grid = (triton.cdiv(n, 64),)
    constexpr = getattr(tl, out)
    fast[grid](src, ours, n, stride, offset, OUT=constexpr, BLOCK=64, num_warps=2)
    gather[grid](src, theirs, n, stride, offset, OUT=constexpr, BLOCK=64, num_warps=2)
    _same([ours], [theirs])


@pytest.mark.parametrize("framework", ["cupy", "jax", "numba"])
def test_arrays_of_other_frameworks_give_tritons_results_on_torch(framework):
    n = 5000
    x_host = np.linspace(-3, 3, n, dtype=np.float32)
    y_host = np.full(n, 0.5, dtype=np.float32)
    if framework == "cupy":
        cupy = pytest.importorskip("cupy")
        x, y, ours = cupy.asarray(x_host), cupy.asarray(y_host), cupy.zeros(n, np.float32)
        back = cupy.asnumpy
    elif framework == "jax":
        jax = pytest.importorskip("jax")
        try:
            gpu = jax.devices("gpu")[0]
        except RuntimeError:
            pytest.skip("jax has no GPU backend here")
        x, y = jax.device_put(x_host, gpu), jax.device_put(y_host, gpu)
        ours = torch.zeros(n, device="cuda")          # jax arrays are read-only: out is torch
        back = np.asarray
    else:
        numba_cuda = pytest.importorskip("numba.cuda")
        x, y = numba_cuda.to_device(x_host), numba_cuda.to_device(y_host)
        ours = numba_cuda.device_array(n, np.float32)
        back = lambda a: a.copy_to_host()   # noqa: E731
    theirs = torch.zeros(n, device="cuda")
    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    grid = (triton.cdiv(n, 256),)
    fast[grid](x, y, ours, n, BLOCK=256)
    add[grid](torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda(), theirs, n,
              BLOCK=256)
    torch.cuda.synchronize()
    got = ours.cpu().numpy() if isinstance(ours, torch.Tensor) else back(ours)
    np.testing.assert_array_equal(got, theirs.cpu().numpy())


def test_a_read_only_array_where_the_kernel_writes_is_refused():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    x = torch.zeros(64, device="cuda")
    frozen = jax.device_put(np.zeros(64, np.float32), gpu)
    with pytest.raises(BufferError, match="argument 'out_ptr' .* is read-only, but the kernel "
                                          "writes it"):
        fast[(1,)](x, x, frozen, 64, BLOCK=64)


def _jax_gpu():
    jax = pytest.importorskip("jax")
    try:
        return jax, jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")


def test_a_jax_array_still_being_computed_is_ordered_before_the_kernel():
    jax, gpu = _jax_gpu()

    @jax.jit
    def slow(a):
        for _ in range(8):
            a = a @ a * 0.5 + 1.0
        return a

    a = jax.device_put(np.full((2048, 2048), 1e-4, np.float32), gpu)
    slow(a).block_until_ready()                     # compiled, and the GPU warm
    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    n = 2048 * 2048
    zeros = jax.device_put(np.zeros(n, np.float32), gpu)
    out = torch.zeros(n, device="cuda")
    x = slow(a)
    fast[(triton.cdiv(n, 1024),)](x, zeros, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), np.asarray(x).reshape(-1))


@pytest.mark.parametrize("python_code", ["a compilation", "Triton's scratch allocator"])
def test_a_jax_array_deleted_by_python_code_between_read_and_launch_stays_held(python_code,
                                                                                monkeypatch):
    # The wrapper reads a computed jax array without holding its buffer (nothing made from the
    # read outlives the launch), but takes the hold before any Python code runs between the
    # read and the launch: freed, its memory would be jax's to reuse (the decoys below).
    jax, gpu = _jax_gpu()
    M = N = 64
    host = np.arange(M * N, dtype=np.float32).reshape(M, N)
    src = jax.device_put(host, gpu)
    src.block_until_ready()
    decoys = []

    def free_src():
        if not src.is_deleted():
            src.delete()
            decoys.extend(jax.device_put(np.full_like(host, -1.0), gpu) for _ in range(20))
            jax.block_until_ready(decoys)

    out = torch.zeros(M, N, device="cuda")
    if python_code == "a compilation":
        compile_kernel = _triton._compile

        def compile_then_free(*args):
            compiled = compile_kernel(*args)
            free_src()
            return compiled

        monkeypatch.setattr(_triton, "_compile", compile_then_free)
        fast = interop_core.triton_kernel(add, writable=("out_ptr",))
        fast[(triton.cdiv(M * N, 256),)](src, src, out, M * N, BLOCK=256)
        expected = 2 * host
    else:
        def allocator(size, alignment, stream):
            free_src()
            return torch.empty(size, dtype=torch.int8, device="cuda")

        fast = interop_core.triton_kernel(tile_copy)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        triton.set_allocator(lambda size, alignment, stream: torch.empty(
            size, dtype=torch.int8, device="cuda"))
        compiled = fast[grid](torch.zeros(M, N, device="cuda"), out, M, N, BLOCK_M=32,
                              BLOCK_N=32)                           # compiled for this key
        if compiled.metadata.global_scratch_size == 0:
            pytest.skip("this Triton compiled the kernel without global scratch")
        triton.set_allocator(allocator)
        fast[grid](src, out, M, N, BLOCK_M=32, BLOCK_N=32)
        expected = host
    torch.cuda.synchronize()
    assert src.is_deleted()
    np.testing.assert_array_equal(out.cpu().numpy().reshape(M, N), expected)


def test_a_missing_argument_is_named_before_the_grid_callable_runs():
    fast = interop_core.triton_kernel(add)
    x = torch.zeros(64, device="cuda")
    asked = []
    with pytest.raises(TypeError, match=r"add\(\) missing a required argument: 'n'"):
        fast[lambda meta: asked.append(meta) or (1,)](x, x, x, BLOCK=64)
    assert asked == []


def test_a_launch_on_another_stream_waits_for_the_producer():
    fast = interop_core.triton_kernel(add)
    n = 1 << 20
    x = torch.ones(n, device="cuda")
    side = torch.cuda.Stream()
    out = torch.zeros(n, device="cuda")
    x.mul_(3)                                    # enqueued on the current stream
    fast.run(x, x, out, n, grid=(triton.cdiv(n, 1024),), stream=side, BLOCK=1024)
    side.synchronize()
    assert torch.equal(out, torch.full_like(out, 6.0))


def test_global_scratch_is_allocated_as_triton_allocates_it():
    def allocator(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(allocator)
    fast = interop_core.triton_kernel(tile_copy)
    M, N = 100, 96
    src = torch.randn(M, N, device="cuda")
    ours, theirs = torch.zeros_like(src), torch.zeros_like(src)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    compiled = fast[grid](src, ours, M, N, BLOCK_M=32, BLOCK_N=32)
    tile_copy[grid](src, theirs, M, N, BLOCK_M=32, BLOCK_N=32)
    _same([ours], [theirs])
    assert torch.equal(ours, src)
    if compiled.metadata.global_scratch_size == 0:
        pytest.skip("this Triton compiled the kernel without global scratch")


def test_autotuned_kernels_run_through_tritons_own_launch():
    fast = interop_core.triton_kernel(tuned_add)
    assert fast.always_own
    n = 4000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    ours, theirs = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK"]),)

    fast[grid](x, y, ours, n)
    tuned_add[grid](x, y, theirs, n)
    _same([ours], [theirs])


def test_each_specialisation_is_compiled_by_triton_once_and_then_launched_directly():
    fast = interop_core.triton_kernel(add)
    x = torch.randn(4096, device="cuda")
    out = torch.zeros_like(x)
    for n in (4096, 4096, 4001, 4096, 4000):
        fast[(32,)](x, x, out, n, BLOCK=128)
    entries = _triton_launch._entries(fast)
    assert len(entries) == 2                      # n divisible by 16 (4096, 4000) or not
    assert all(isinstance(e, _triton_launch.CompiledLaunch) for e in entries.values())
    layouts = {e.layout for e in entries.values()}
    assert layouts == {("*fp32", "*fp32", "*fp32", "i32", "global_scratch", "profile_scratch")}


def test_a_tritons_cubin_loads_and_launches_through_the_public_launch():
    fast = interop_core.triton_kernel(add)
    n = 1000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    ours, theirs = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    compiled = fast[(8,)](x, y, theirs, n, BLOCK=128)
    kernel = interop_core.load_module(compiled.asm["cubin"], x.device.index).kernel(
        compiled.metadata.name)
    assert kernel.param_sizes in (None, (8, 8, 8, 4, 8, 8))
    stream = torch.cuda.current_stream()
    record = interop_core.launch_args((x, y, ours, n, None, None), stream,
                                      scalar_types=(None, None, None, "int32", None, None))
    kernel.launch(8, 32 * compiled.metadata.num_warps, record,
                  shared_mem=compiled.metadata.shared)
    _same([ours], [theirs])
