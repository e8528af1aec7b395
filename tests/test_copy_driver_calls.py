"""Which CUDA driver calls a copy makes, counted on any machine with a fake libcuda.

Each test runs in a subprocess whose ``libcuda.so.1`` is tests/fake_libcuda.c (see
tests/fake_driver.py): "device memory" there is host memory, so results are checked too.  The
copy of dense device memory on a stream is the path whose host cost has a budget: its calls
are listed exactly, on a CUDA 13 driver and on one without ``cuStreamGetDevice`` (before 12.8).
"""

from __future__ import annotations

import sys

import pytest
from fake_driver import build, compiler, run

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or compiler() is None,
    reason="needs Linux and a C compiler to build the fake libcuda")

S = 0x5000          # a stream of device 0 in the fake
OTHER = 0x6000      # another stream of device 0
FOREIGN = 0x15000   # a stream of device 1

# Views of "device 0" memory: a producer stream comes from the CUDA Array Interface's `stream`
# (1: the legacy default stream, what torch's default stream is).
SETUP = """
import numpy as np
from interop_core import StridedMemoryView, view

class Device:
    def __init__(self, values, stream=None, readonly=False, order="C"):
        self.a = np.array(values, np.float32, order=order)
        self.__cuda_array_interface__ = {
            "shape": self.a.shape, "typestr": "<f4", "data": (self.a.ctypes.data, readonly),
            "strides": self.a.strides, "version": 3, "stream": stream}

def calls(log):
    return [name if arg is None else f"{name} {arg:#x}" for name, arg in log]

make_current(0)      # as torch leaves it on a thread that used device 0
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda13"))


@pytest.fixture(scope="module")
def old_driver(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda12_4"), stream_get_device=False)


def _copy_twice(extra=""):
    # The first copy also retains the primary context and creates the ordering event.
    return SETUP + extra + """
s, d = view(Device([7.0], stream=1)), view(Device([0.0], stream=1))
d.copy_from(s, STREAM)
take_log()
d.copy_from(s, STREAM)
report({"calls": calls(take_log()), "value": float(np.asarray(d.owner.a)[0]),
        "producer": d.producer_stream})
"""


def test_a_4_byte_device_copy_on_a_stream_makes_five_driver_calls(driver):
    out = run(driver, f"STREAM = {S}\n" + _copy_twice())
    assert out["calls"] == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent",
                            "cuEventRecord 0x1", f"cuStreamWaitEvent {S:#x}",
                            f"cuMemcpyAsync {S:#x}"]
    assert out["value"] == 7.0
    assert out["producer"] == S


def test_without_a_current_context_the_copy_pushes_the_devices_once(driver):
    out = run(driver, f"STREAM = {S}\n" + _copy_twice("make_current(-1)\n"))
    assert out["calls"] == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent", "cuCtxPushCurrent",
                            "cuEventRecord 0x1", f"cuStreamWaitEvent {S:#x}",
                            f"cuMemcpyAsync {S:#x}", "cuCtxPopCurrent"]


def test_before_cuda_12_8_the_streams_context_names_its_device(old_driver):
    out = run(old_driver, f"STREAM = {S}\n" + _copy_twice())
    assert out["calls"] == [f"cuStreamGetCtx {S:#x}", "cuCtxGetCurrent", "cuEventRecord 0x1",
                            f"cuStreamWaitEvent {S:#x}", f"cuMemcpyAsync {S:#x}"]
    assert out["value"] == 7.0


@pytest.mark.parametrize("which", ["driver", "old_driver"])
def test_a_stream_of_another_device_is_refused_before_anything_is_enqueued(which, request):
    out = run(request.getfixturevalue(which), SETUP + f"""
d = view(Device([0.0], stream=1))
take_log()
try:
    d.copy_from(view(Device([7.0], stream=1)), {FOREIGN})
except ValueError as exc:
    error = str(exc)
report({{"error": error, "calls": calls(take_log()), "value": float(d.owner.a[0])}})
""")
    assert "stream belongs to CUDA device 1" in out["error"]
    assert not [c for c in out["calls"] if c.split()[0] in (
        "cuEventRecord", "cuStreamWaitEvent", "cuMemcpyAsync")]
    assert out["value"] == 0.0


def test_producers_on_the_copys_own_stream_are_not_ordered(driver):
    out = run(driver, SETUP + f"""
d = view(Device([0.0], stream={S}))
s = view(Device([7.0], stream={S}))
d.copy_from(s, {S})
take_log()
d.copy_from(s, {S})
report(calls(take_log()))
""")
    assert out == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent", f"cuMemcpyAsync {S:#x}"]


def test_a_producer_stream_shared_by_both_sides_is_ordered_once(driver):
    out = run(driver, SETUP + f"""
d = view(Device([0.0], stream={OTHER}))
s = view(Device([7.0], stream={OTHER}))
d.copy_from(view(Device([1.0], stream=1)), {S})      # setup calls
take_log()
view(Device([0.0], stream={OTHER})).copy_from(s, {S})
report(calls(take_log()))
""")
    assert out == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent", f"cuEventRecord {OTHER:#x}",
                   f"cuStreamWaitEvent {S:#x}", f"cuMemcpyAsync {S:#x}"]


def test_both_producers_are_ordered_when_they_differ(driver):
    out = run(driver, SETUP + f"""
view(Device([0.0], stream={S})).copy_from(view(Device([1.0], stream=1)), {S})   # setup calls
take_log()
view(Device([0.0], stream={OTHER})).copy_from(view(Device([7.0], stream=1)), {S})
report(calls(take_log()))
""")
    assert out == [f"cuStreamGetDevice {S:#x}", "cuCtxGetCurrent", "cuEventRecord 0x1",
                   f"cuStreamWaitEvent {S:#x}", f"cuEventRecord {OTHER:#x}",
                   f"cuStreamWaitEvent {S:#x}", f"cuMemcpyAsync {S:#x}"]


def test_without_a_stream_the_copy_runs_on_the_legacy_stream_and_the_host_waits(driver):
    out = run(driver, SETUP + """
d = view(Device([0.0], stream=1))
d.copy_from(view(Device([1.0], stream=1)))
take_log()
d.copy_from(view(Device([7.0], stream=1)))
report({"calls": calls(take_log()), "value": float(d.owner.a[0]),
        "producer": d.producer_stream})
""")
    assert out["calls"] == ["cuCtxGetCurrent", "cuMemcpyAsync 0x0", "cuCtxGetCurrent",
                            "cuStreamSynchronize 0x0"]
    assert out["value"] == 7.0
    assert out["producer"] == 1          # unchanged: nothing is pending on a stream


def test_bad_input_is_refused_without_any_driver_call(driver):
    out = run(driver, SETUP + f"""
errors = []
for dst, src in [(Device([0.0]), Device([1.0, 2.0])),
                 (Device([0.0], readonly=True), Device([1.0]))]:
    take_log()
    try:
        view(dst).copy_from(view(src), {S})
    except (ValueError, BufferError) as exc:
        errors.append([type(exc).__name__, calls(take_log()), float(dst.a[0])])
report(errors)
""")
    assert [e[0] for e in out] == ["ValueError", "BufferError"]
    assert all(e[1] == [] and e[2] == 0.0 for e in out)


def test_overlapping_dense_copies_go_through_a_temporary(driver):
    out = run(driver, SETUP + f"""
buf = Device([0.0, 1.0, 2.0, 3.0, 4.0], stream=1)
whole = view(buf)
take_log()
whole[1:5].copy_from(whole[0:4], {S})
report({{"values": buf.a.tolist(), "calls": calls(take_log())}})
""")
    assert out["values"] == [0.0, 0.0, 1.0, 2.0, 3.0]
    assert [c for c in out["calls"] if c.startswith("cuMemcpyAsync")] == [
        f"cuMemcpyAsync {S:#x}"] * 2


def test_a_fortran_ordered_pair_is_one_memcpy_too(driver):
    out = run(driver, SETUP + f"""
src = Device(np.arange(6.0).reshape(2, 3), stream=1, order="F")
dst = Device(np.zeros((2, 3)), stream=1, order="F")
take_log()
view(dst).copy_from(view(src), {S})
report({{"calls": calls(take_log()), "equal": bool((dst.a == src.a).all())}})
""")
    assert [c for c in out["calls"] if c.startswith("cuMemcpy")] == [f"cuMemcpyAsync {S:#x}"]
    assert out["equal"]
