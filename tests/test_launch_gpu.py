"""The launch path on a GPU: a PTX kernel launched with ``launch_args``'s kernelParams array on
torch, cupy, jax and numba inputs, kernels cached by key, producers ordered once per stream."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from interop_core import launch_args, view
from interop_core.cuda import _cuda

AXPY_PTX = (Path(__file__).resolve().parent.parent / "examples" / "axpy.ptx").read_text()
SCALARS_F32 = (None, None, None, "float32", None)
N = 5000


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.fixture(scope="module")
def kernels(torch_cuda):
    from interop_core.cuda import _module

    module = _module.load_ptx(AXPY_PTX, torch_cuda.cuda.current_device())
    return {name: module.kernel(name) for name in ("axpy_f32", "axpy_f32_f64a")}


def _device_array(framework, host):
    """``host`` (numpy) copied to the GPU as ``framework``'s array; skips when unavailable."""
    if framework == "torch":
        import torch

        return torch.from_numpy(host).cuda()
    if framework == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.asarray(host)
    if framework == "numba":
        numba_cuda = pytest.importorskip("numba.cuda")
        return numba_cuda.to_device(host)
    if framework == "jax":
        jax = pytest.importorskip("jax")
        try:
            gpu = jax.devices("gpu")[0]
        except RuntimeError:
            pytest.skip("jax has no GPU backend here")
        return jax.device_put(host, gpu)
    raise ValueError(framework)


def _to_numpy(framework, array):
    if framework == "torch":
        return array.cpu().numpy()
    if framework == "cupy":
        return array.get()
    if framework == "numba":
        return array.copy_to_host()
    return np.asarray(array)


def _launch(kernel, record, n=N):
    from interop_core.cuda import _module

    _module.launch(kernel, (n + 255) // 256, 256, record.kernel_params_address, record.stream)


@pytest.mark.gpu
@pytest.mark.parametrize("out_framework", ["torch", "cupy", "numba"])
@pytest.mark.parametrize("in_framework", ["torch", "cupy", "numba", "jax"])
def test_a_ptx_kernel_computes_axpy_on_every_frameworks_memory(torch_cuda, kernels,
                                                              out_framework, in_framework):
    torch = torch_cuda
    x_host = np.linspace(-1, 1, N, dtype=np.float32)
    y_host = np.full(N, 0.25, dtype=np.float32)
    out = _device_array(out_framework, np.zeros(N, dtype=np.float32))
    x, y = _device_array(in_framework, x_host), _device_array(in_framework, y_host)
    stream = torch.cuda.Stream()
    record = launch_args((out, x, y, 3.0, N), stream, writable=(0,), same_device=True,
                         scalar_types=SCALARS_F32)
    assert record.stream == stream.cuda_stream
    _launch(kernels["axpy_f32"], record)
    stream.synchronize()
    # The kernel fuses the multiply-add (one rounding); numpy rounds twice: compare within
    # float32 rounding, absolute near zero.
    np.testing.assert_allclose(_to_numpy(out_framework, out), 3.0 * x_host + 0.25, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.gpu
def test_a_python_float_arrives_as_a_c_double(torch_cuda, kernels):
    torch = torch_cuda
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    record = launch_args((out, x, x, 0.5, N), torch.cuda.current_stream())
    assert record.scalar_type(3) == "float64"
    _launch(kernels["axpy_f32_f64a"], record)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 1.5 * x)


@pytest.mark.gpu
def test_kernels_cached_by_key_are_shared_across_frameworks(torch_cuda, kernels):
    torch = torch_cuda
    compiled = {}

    def launcher(out, x, y, a, stream):
        record = launch_args((out, x, y, a, N), stream, scalar_types=SCALARS_F32)
        kernel = compiled.setdefault(record.key, kernels["axpy_f32"])
        _launch(kernel, record)

    stream = torch.cuda.Stream()
    host = np.ones(N, dtype=np.float32)
    frameworks = ["torch", "cupy", "numba"]
    outs = []
    for fw in frameworks:
        arrays = [_device_array(fw, host) for _ in range(3)]
        launcher(*arrays, 2.0, stream)
        outs.append((fw, arrays[0]))
    stream.synchronize()
    for fw, out in outs:
        np.testing.assert_array_equal(_to_numpy(fw, out), np.full(N, 3.0, np.float32))
    assert len(compiled) == 1          # same dtype / shape / strides / device: one key


@pytest.mark.gpu
def test_one_ordering_per_distinct_producer_stream(torch_cuda):
    torch = torch_cuda
    first, second, consumer = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    tensors = [torch.ones(16, device="cuda") for _ in range(6)]
    with torch.cuda.stream(first):
        from_first = [view(t) for t in tensors[:4]]          # producer stream: `first`
    with torch.cuda.stream(second):
        from_second = [view(t) for t in tensors[4:]]         # producer stream: `second`
    before = _cuda.orderings_enqueued()
    launch_args(from_first + [1.0] + from_second, consumer)
    assert _cuda.orderings_enqueued() == before + 2
    with torch.cuda.stream(first):
        before = _cuda.orderings_enqueued()
        launch_args(tensors + [2, None], first)             # all on the consumer's stream
        assert _cuda.orderings_enqueued() == before
        launch_args(tensors, consumer)                      # one producer stream: one wait
        assert _cuda.orderings_enqueued() == before + 1


@pytest.mark.gpu
def test_each_call_reads_the_current_stream_afresh_and_once_for_all_its_tensors(torch_cuda):
    # The torch reader asks torch for a device's current stream once per launch_args call (the
    # core's batch number): a stream switched between calls must still be seen.
    torch = torch_cuda
    other, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    tensors = [torch.ones(8, device="cuda") for _ in range(5)]
    for current, waits in ((consumer, 0), (other, 1), (consumer, 0), (other, 1)):
        with torch.cuda.stream(current):
            before = _cuda.orderings_enqueued()
            launch_args(tensors, consumer)
            assert _cuda.orderings_enqueued() - before == waits


@pytest.mark.gpu
def test_the_launch_stream_waits_for_the_producer_without_blocking_the_host(torch_cuda, kernels):
    torch = torch_cuda
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(N, device="cuda")
    out = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    returned_early = 0
    trials = 20
    for trial in range(1, trials + 1):
        with torch.cuda.stream(producer):
            torch.cuda._sleep(50_000_000)
            x.fill_(float(trial))
            start = time.perf_counter()
            record = launch_args((out, x, x, 1.0, N), consumer, scalar_types=SCALARS_F32)
            returned_early += time.perf_counter() - start < 0.005
        _launch(kernels["axpy_f32"], record)
        consumer.synchronize()
        assert float(out.min()) == 2.0 * trial == float(out.max()), f"trial {trial}"
    assert returned_early >= trials - 2, "the host waited for the producer's kernel"


@pytest.mark.gpu
def test_views_of_device_memory_come_from_the_record(torch_cuda):
    torch = torch_cuda
    t = torch.ones(3, 4, device="cuda")
    record = launch_args([t, 1.0])
    v = record.views[0]
    assert (v.ptr, v.shape, v.device_type, v.owner) == (t.data_ptr(), (3, 4), 2, t)
    assert view(t).key == launch_args([t]).key
    assert list(record.pointers)[0] == t.data_ptr()


# -- the public launch: load_module, Module.kernel, Kernel.launch ------------------------------

AXPY_PATH = Path(__file__).resolve().parent.parent / "examples" / "axpy.ptx"
ADD3_SIGNATURE = ("pointer", "pointer", "pointer", "pointer", "int64")


@pytest.fixture(scope="module")
def public_module(torch_cuda):
    from interop_core import load_module

    return load_module(AXPY_PATH, torch_cuda.cuda.current_device())


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy", "numba", "jax"])
def test_the_public_launch_runs_a_ptx_kernel_on_every_frameworks_memory(torch_cuda,
                                                                       public_module, framework):
    torch = torch_cuda
    kernel = public_module.kernel("add3_f32", ADD3_SIGNATURE)
    hosts = [np.linspace(-1, 1, N, dtype=np.float32) * k for k in (1, 2, 3)]
    x, y, z = (_device_array(framework, h) for h in hosts)
    out = torch.zeros(N, device="cuda")
    stream = torch.cuda.Stream()
    kernel.launch((N + 255) // 256, 256, launch_args((out, x, y, z, N), stream, writable=(0,)))
    stream.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), hosts[0] + hosts[1] + hosts[2], rtol=1e-6)


@pytest.mark.gpu
def test_the_driver_reports_the_parameter_sizes_and_a_float64_for_a_float_is_refused(
        torch_cuda, public_module):
    torch = torch_cuda
    kernel = public_module.kernel("axpy_f32")
    if kernel.param_sizes is None:
        pytest.skip("this driver cannot report parameter sizes (cuFuncGetParamInfo, CUDA 12.4)")
    assert kernel.param_sizes == (8, 8, 8, 4, 8)
    x = torch.ones(N, device="cuda")
    record = launch_args((x, x, x, 2.0, N), torch.cuda.current_stream())
    with pytest.raises(TypeError, match="stored as float64 \\(8 bytes\\), but the kernel's "
                                        "parameter 3 takes 4 bytes"):
        kernel.launch(1, 32, record)


@pytest.mark.gpu
def test_a_cluster_launch_computes_what_a_plain_one_does(torch_cuda, public_module):
    from interop_core.cuda import _module

    torch = torch_cuda
    if not _module._device_limits(torch.cuda.current_device())["cluster_launch"]:
        pytest.skip("this GPU cannot launch thread-block clusters (compute capability < 9.0)")
    kernel = public_module.kernel("add3_f32", ADD3_SIGNATURE)
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(x)
    blocks = 2 * ((N + 511) // 512)
    kernel.launch(blocks, 256, launch_args((out, x, x, x, N), torch.cuda.current_stream()),
                  cluster=2)
    torch.cuda.synchronize()
    assert torch.equal(out, 3 * x)


@pytest.mark.gpu
def test_a_grid_beyond_the_devices_limits_is_refused_before_launch(torch_cuda, public_module):
    torch = torch_cuda
    kernel = public_module.kernel("add3_f32", ADD3_SIGNATURE)
    x = torch.zeros(4, device="cuda")
    record = launch_args((x, x, x, x, 4), torch.cuda.current_stream())
    with pytest.raises(ValueError, match="grid\\[1\\] must be between 1 and 65535"):
        kernel.launch((1, 65536), 32, record)
    with pytest.raises(ValueError, match="has 2048 threads"):
        kernel.launch(1, (1024, 2), record)
