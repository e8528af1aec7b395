"""PTX modules and launches through the lazy driver binding (``interop_core.cuda._module``)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from cuda_probe import cuda_device_count

from interop_core.cuda import _module

AXPY_PTX = (Path(__file__).resolve().parent.parent / "examples" / "axpy.ptx").read_text()


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the driver-less behaviour")
def test_loading_ptx_without_a_driver_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs the CUDA driver"):
        _module.load_ptx(AXPY_PTX)


@pytest.mark.parametrize(("ptx", "device_id", "error", "match"), [
    (42, 0, TypeError, "ptx must be str or bytes"),
    (AXPY_PTX, "0", TypeError, "device_id must be an int"),
    (AXPY_PTX, -1, ValueError, "device_id must be >= 0"),
    ("bad\0ptx", 0, ValueError, "NUL"),
], ids=["ptx-int", "device-str", "device-negative", "nul"])
def test_load_ptx_rejects_malformed_arguments_before_touching_the_driver(ptx, device_id, error,
                                                                        match):
    with pytest.raises(error, match=match):
        _module.load_ptx(ptx, device_id)


def test_modules_and_kernels_are_made_only_by_the_loader():
    with pytest.raises(TypeError, match="load_ptx"):
        _module.Module()
    with pytest.raises(TypeError, match="Module.kernel"):
        _module.Kernel()


# -- on a GPU ---------------------------------------------------------------------------------


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def _kernel_params(*values):
    """A kernelParams array by hand (ctypes): one pointer per parameter to its value."""
    slots = [ctypes.c_uint64(v) if isinstance(v, int) else v for v in values]
    params = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
    return params, slots


@pytest.mark.gpu
@pytest.mark.parametrize(("entry", "scalar"), [
    ("axpy_f32", ctypes.c_float(3.0)),
    ("axpy_f32_f64a", ctypes.c_double(3.0)),
])
def test_a_ptx_kernel_launched_on_a_torch_stream_computes_axpy(entry, scalar):
    torch = _torch_cuda()
    kernel = _module.load_ptx(AXPY_PTX, torch.cuda.current_device()).kernel(entry)
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    y = torch.ones(n, dtype=torch.float32, device="cuda")
    out = torch.zeros(n, dtype=torch.float32, device="cuda")
    params, keep = _kernel_params(out.data_ptr(), x.data_ptr(), y.data_ptr(), scalar,
                                  ctypes.c_int64(n))
    stream = torch.cuda.current_stream()
    _module.launch(kernel, (n + 255) // 256, 256, ctypes.addressof(params), stream)
    stream.synchronize()
    assert torch.equal(out, 3.0 * x + 1.0)
    del keep


@pytest.mark.gpu
def test_a_kernel_keeps_its_module_loaded_and_unknown_names_are_value_errors():
    _torch_cuda()
    module = _module.load_ptx(AXPY_PTX)
    kernel = module.kernel("axpy_f32")
    assert kernel.module is module and kernel.name == "axpy_f32" and kernel.handle
    del module
    assert kernel.module.handle
    with pytest.raises(ValueError, match="no kernel named 'nope'"):
        kernel.module.kernel("nope")


@pytest.mark.gpu
def test_ptx_the_driver_rejects_is_a_value_error_with_the_jit_log():
    _torch_cuda()
    with pytest.raises(ValueError, match="cuModuleLoadDataEx"):
        _module.load_ptx(".version 7.0\n.target sm_52\n.address_size 64\nnot ptx at all\n")


@pytest.mark.gpu
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"grid": 0}, ValueError, "grid\\[0\\] must be between"),
    ({"grid": (1, 1, 1, 1)}, TypeError, "grid must be an int or a tuple"),
    ({"block": 1.5}, TypeError, "block must be an int"),
    ({"params_address": -1}, ValueError, "not an address"),
    ({"stream": None}, ValueError, "needs a stream"),
    ({"shared_mem": -1}, ValueError, "shared_mem"),
], ids=["grid-zero", "grid-4d", "block-float", "address-negative", "stream-none",
        "shared-negative"])
def test_launch_rejects_malformed_arguments(kwargs, error, match):
    _torch_cuda()
    kernel = _module.load_ptx(AXPY_PTX).kernel("axpy_f32")
    call = {"grid": 1, "block": 1, "params_address": 0, "stream": 0, "shared_mem": 0} | kwargs
    with pytest.raises(error, match=match):
        _module.launch(kernel, **call)
