"""The core protocols on real CUDA memory: every framework in, every framework out, zero-copy.

Marked `gpu`; skipped where no CUDA device exists.  Run through scripts/gpu_check.sh.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from interop_core import StridedMemoryView

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


TORCH_LAYOUTS = {
    "contiguous": lambda t: t,
    "sliced": lambda t: t[1:, ::2],
    "transposed": lambda t: t.t(),
    "zero_size": lambda t: t[:0],
    "zero_d": lambda t: t[1, 2],
}


@pytest.mark.parametrize("layout", sorted(TORCH_LAYOUTS))
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16", "int64", "bool",
                                        "complex64"])
def test_torch_cuda_tensor_views_match_tensor_metadata(torch_cuda, layout, dtype_name):
    torch = torch_cuda
    base = torch.arange(24, device="cuda").reshape(4, 6).to(getattr(torch, dtype_name))
    tensor = TORCH_LAYOUTS[layout](base)
    view = StridedMemoryView.from_any(tensor)
    assert view.ptr == tensor.data_ptr()
    assert view.shape == tuple(tensor.shape) and view.strides == tensor.stride()
    assert (view.device_type, view.device_id) == (2, tensor.device.index)
    assert view.is_device_accessible and not view.is_host_accessible
    assert view.itemsize == tensor.element_size()


def test_torch_cuda_round_trip_through_the_view_is_zero_copy(torch_cuda):
    torch = torch_cuda
    tensor = torch.arange(12.0, device="cuda").reshape(3, 4)
    back = torch.from_dlpack(StridedMemoryView.from_any(tensor)[:, 1:])
    assert back.data_ptr() == tensor.data_ptr() + 4
    back.fill_(-1.0)
    assert float(tensor[0, 1]) == -1.0 and float(tensor[0, 0]) == 0.0


def test_cupy_array_through_cuda_array_interface_and_back(cupy):
    array = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)[:, ::2]
    view = StridedMemoryView.from_cuda_array_interface(array)
    assert view.ptr == array.data.ptr and view.shape == array.shape
    assert view.strides == tuple(s // 4 for s in array.strides)
    out = cupy.asarray(view)  # consumes our __cuda_array_interface__
    assert out.data.ptr == array.data.ptr
    out[...] = 5
    assert int(array.sum()) == 5 * array.size
    via_dlpack = cupy.from_dlpack(view)
    assert via_dlpack.data.ptr == array.data.ptr


def test_cupy_view_records_the_cai_stream(cupy):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        array = cupy.zeros(8)
        view = StridedMemoryView.from_cuda_array_interface(array)
    assert view.producer_stream == stream.ptr
    assert view.__cuda_array_interface__["stream"] == stream.ptr


def test_torch_to_cupy_and_back_keeps_the_tensor_alive(torch_cuda, cupy):
    torch = torch_cuda

    class Holder:
        def __init__(self):
            self.tensor = torch.ones(1024, device="cuda")

        def __dlpack__(self, **kwargs):
            return self.tensor.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.tensor.__dlpack_device__()

    holder = Holder()
    ref = weakref.ref(holder)
    array = cupy.from_dlpack(StridedMemoryView.from_any(holder))
    del holder
    gc.collect()
    assert ref() is not None
    assert float(array.sum()) == 1024.0
    del array
    gc.collect()
    assert ref() is None


def test_numba_cuda_consumes_the_view(torch_cuda):
    numba_cuda = pytest.importorskip("numba.cuda")
    tensor = torch_cuda.arange(6, dtype=torch_cuda.float64, device="cuda")
    array = numba_cuda.as_cuda_array(StridedMemoryView.from_any(tensor))
    assert array.__cuda_array_interface__["data"][0] == tensor.data_ptr()
    assert array.copy_to_host().tolist() == list(range(6))


def test_jax_cuda_array_views_are_device_memory():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    array = jax.device_put(jax.numpy.arange(8.0), gpu)
    view = StridedMemoryView.from_any(array)
    assert view.device_type == 2 and view.shape == (8,)
    assert view.ptr == array.unsafe_buffer_pointer()
