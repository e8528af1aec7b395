"""The lazy CUDA driver binding: answers cleanly without a driver, knows pointers with one."""

from __future__ import annotations

import pytest
from cuda_probe import cuda_device_count

from interop_core import Buffer
from interop_core.cuda import _cuda


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the driver-less behaviour")
def test_without_a_driver_everything_is_host_memory():
    assert _cuda.driver_version() is None
    assert _cuda.pointer_attributes(0x1000) is None
    buf = Buffer.from_handle(0x1000, 16)
    assert (buf.device_type, buf.device_id) == (1, 0)


@pytest.mark.parametrize(
    ("bad", "error"), [(-1, ValueError), (2**64, ValueError), (1.0, TypeError), ("0x10", TypeError)]
)
def test_pointer_attributes_rejects_non_addresses(bad, error):
    with pytest.raises(error, match="ptr must be an"):
        _cuda.pointer_attributes(bad)


@pytest.mark.gpu
def test_driver_reports_device_memory_and_pinned_memory():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    assert _cuda.driver_version() >= 11000
    on_device = torch.zeros(16, device="cuda")
    assert _cuda.pointer_attributes(on_device.data_ptr()) == (2, on_device.device.index)
    pinned = torch.zeros(16).pin_memory()
    assert _cuda.pointer_attributes(pinned.data_ptr())[0] == 3
    assert _cuda.pointer_attributes(torch.zeros(16).data_ptr()) is None
    buf = Buffer.from_handle(on_device.data_ptr(), 64, owner=on_device)
    assert (buf.device_type, buf.device_id) == (2, on_device.device.index)
