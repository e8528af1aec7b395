"""The stream contract: accepted stream values, driver-less behaviour, and (on a GPU) ordering.

The GPU tests prove ordering rather than that calls return: the producer enqueues a long kernel
and then writes known values on stream A; the consumer reads on stream B right after
`view(x, stream=B)` / `to(x, ..., stream=B)` returns.  Without the wait B would read stale
values; with it the values are right in every trial, and the host got its view back long before
the producer's kernel finished (nothing blocked).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from conftest import validation_result
from cuda_probe import cuda_device_count

import interop_core
from interop_core import StridedMemoryView, resolve_consumer_stream, view
from interop_core.cuda import _cuda


class CudaStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize(("stream", "expected"), [
    (None, None), (-1, None), (0, 0), (1, 1), (2, 2), (0x7F00_1234, 0x7F00_1234),
    (CudaStream(0xBEEF), 0xBEEF),
])
def test_stream_values_resolve_per_the_contract(stream, expected):
    assert resolve_consumer_stream(stream) == expected


@pytest.mark.parametrize(("stream", "error"), [
    ("default", TypeError), (1.0, TypeError), (True, TypeError), (-2, ValueError),
    (2**64, ValueError), (CudaStream("x"), TypeError),
])
def test_bad_stream_values_raise_clearly(stream, error):
    with pytest.raises(error, match="stream"):
        resolve_consumer_stream(stream)


# Handles the driver would dereference and crash on: page 0, and values no process address has
# (2**63, -1 read as unsigned).  Refused before any driver call, naming the value.
IMPLAUSIBLE_HANDLES = [3, 7, 4095, 2**63, 2**64 - 1]


@pytest.mark.parametrize("handle", IMPLAUSIBLE_HANDLES)
@pytest.mark.parametrize("given_as", ["int", "__cuda_stream__"])
def test_a_handle_that_cannot_be_a_stream_is_a_value_error_naming_it(handle, given_as):
    stream = handle if given_as == "int" else CudaStream(handle)
    with pytest.raises(ValueError, match=f"stream handle {handle} .*cannot be a CUDA stream"):
        resolve_consumer_stream(stream)
    with pytest.raises(ValueError, match="cannot be a CUDA stream"):
        view(np.zeros(3), stream=stream)


@pytest.mark.parametrize("handle", IMPLAUSIBLE_HANDLES)
def test_a_producer_stream_that_cannot_be_a_stream_is_refused(handle):
    class Producer:
        __cuda_array_interface__ = {"version": 3, "shape": (2,), "typestr": "<f4",
                                    "data": (0x10000, False), "stream": handle}

    with pytest.raises(ValueError, match=rf"\['stream'\] {handle} is not a valid stream handle"):
        view(Producer())


def test_host_memory_needs_no_ordering_whatever_the_stream():
    array = np.arange(4.0)
    assert view(array, stream=0x1234).ptr == array.ctypes.data
    assert StridedMemoryView.from_any(array).sync(0x1234).ptr == array.ctypes.data


class DeviceInterface:
    """A CUDA Array Interface producer on a (pretend) device pointer with a stream."""

    def __init__(self, stream):
        self.__cuda_array_interface__ = {
            "shape": (4,), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3,
            "strides": None, "stream": stream}


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the driver-less behaviour")
def test_ordering_without_a_driver_is_a_clear_error():
    producer = DeviceInterface(stream=0x5000)
    with pytest.raises(RuntimeError, match="needs the CUDA driver"):
        view(producer, stream=0x6000)
    # Metadata only, or the producer's own stream: nothing to order, no driver needed.
    assert view(producer).producer_stream == 0x5000
    assert view(producer, stream=0x5000).ptr == 0x7F0000000000


class RegisteredStream:
    def __init__(self, handle):
        self.handle = handle


@pytest.mark.skipif(cuda_device_count() > 0, reason="proves the skip by the missing driver")
def test_a_stream_object_naming_the_producers_stream_needs_no_driver(registered):
    registered(lambda r: r.add_stream_type(RegisteredStream, lambda s: s.handle), "streams")
    producer = DeviceInterface(stream=0x5000)
    same, other = RegisteredStream(0x5000), RegisteredStream(0x6000)
    for _ in range(3):
        assert view(producer, stream=same).producer_stream == 0x5000
    with pytest.raises(RuntimeError, match="needs the CUDA driver"):
        view(producer, stream=other)


class StreamlessDeviceArray(DeviceInterface):
    """A device producer whose interface names no stream; its plugin knows the stream."""

    current_stream = 0x5000

    def __init__(self):
        super().__init__(stream=None)


@pytest.mark.parametrize(("current", "exported"), [(0x5000, 0x5000), (0, 1)])
def test_exports_ask_the_plugins_producer_strategy_when_the_reader_named_no_stream(
        registered, current, exported):
    registered(lambda r: r.add_type(StreamlessDeviceArray, "cuda_array_interface",
                                    producer_stream=lambda obj: obj.current_stream), "streamless")
    producer = StreamlessDeviceArray()
    producer.current_stream = current
    v = view(producer)
    assert v.producer_stream == current
    # The interface forbids 0: the legacy default stream is spelled 1 there.
    assert v.__cuda_array_interface__["stream"] == exported


def test_a_producer_strategy_reporting_no_stream_exports_none(registered):
    registered(lambda r: r.add_type(StreamlessDeviceArray, "cuda_array_interface",
                                    producer_stream=lambda obj: None), "streamless")
    v = view(StreamlessDeviceArray())
    assert v.producer_stream is None
    assert v.__cuda_array_interface__["stream"] is None


def test_same_stream_skips_ordering_entirely():
    _cuda._order_streams(0x5000, 0x5000)   # would need a driver if it did anything
    _cuda._order_streams(0, 1)             # both name the legacy default stream


# --- on a GPU -------------------------------------------------------------------------------------

TRIALS = 50
SLEEP_CYCLES = 50_000_000       # ~25-40 ms of GPU time on an H100


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def _consumer_reads(torch, tensor_like, consumer):
    """Copy on `consumer` (a torch stream) and return the copy."""
    with torch.cuda.stream(consumer):
        return torch.from_dlpack(tensor_like).clone()


@pytest.mark.gpu
@pytest.mark.parametrize("entry_point", ["view", "to", "sync", "sync later"])
def test_torch_producer_is_ordered_before_the_consumer(torch_cuda, entry_point):
    torch = torch_cuda
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    returned_early = 0
    for trial in range(1, TRIALS + 1):
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(float(trial))
            start = time.perf_counter()
            if entry_point == "view":
                handed = view(x, stream=consumer)
            elif entry_point == "to":
                handed = interop_core.to(x, "torch", stream=consumer)
            elif entry_point == "sync":
                handed = view(x).sync(consumer)
            else:
                handed = view(x)        # ordered below, once `producer` is no longer current
            elapsed = time.perf_counter() - start
        if entry_point == "sync later":
            handed.sync(consumer)
        copy = _consumer_reads(torch, handed, consumer)
        consumer.synchronize()
        assert float(copy.min()) == float(trial) == float(copy.max()), f"trial {trial}"
        returned_early += elapsed < 0.005
    assert returned_early >= TRIALS - 2, "the host waited for the producer's kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("entry_point", ["view", "sync later"])
def test_cupy_producer_is_ordered_before_the_consumer(torch_cuda, entry_point):
    cupy = pytest.importorskip("cupy")
    torch = torch_cuda
    producer, consumer = cupy.cuda.Stream(non_blocking=True), torch.cuda.Stream()
    x = cupy.zeros(1 << 20, dtype=cupy.float32)
    for trial in range(1, TRIALS + 1):
        with producer:
            with torch.cuda.stream(torch.cuda.ExternalStream(producer.ptr)):
                torch.cuda._sleep(SLEEP_CYCLES)
            x.fill(trial)
            if entry_point == "view":
                handed = view(x, stream=consumer)
            else:
                handed = view(x)
        if entry_point == "sync later":
            handed.sync(consumer)
        copy = _consumer_reads(torch, handed, consumer)
        consumer.synchronize()
        assert float(copy.min()) == float(trial) == float(copy.max()), f"trial {trial}"


@pytest.mark.gpu
def test_numba_producer_stream_from_the_array_interface_is_honoured(torch_cuda):
    numba_cuda = pytest.importorskip("numba.cuda")
    torch = torch_cuda
    producer = numba_cuda.stream()
    consumer = torch.cuda.Stream()
    host = np.zeros(1 << 20, dtype=np.float32)
    for trial in range(1, TRIALS + 1):
        x = numba_cuda.to_device(host, stream=producer)
        with torch.cuda.stream(torch.cuda.ExternalStream(int(producer))):
            torch.cuda._sleep(SLEEP_CYCLES)
            torch.from_dlpack(StridedMemoryView.from_cuda_array_interface(x)).fill_(trial)
        handed = view(x, stream=consumer)
        copy = _consumer_reads(torch, handed, consumer)
        consumer.synchronize()
        assert float(copy.min()) == float(trial) == float(copy.max()), f"trial {trial}"


@pytest.fixture(scope="module")
def jax_long():
    """(jax, a jitted computation of about 30 ms of GPU time, its input, its trip count)."""
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    jnp = jax.numpy

    # A straight chain of kernels (n static, the loop unrolled): jax enqueues it all and returns.
    # (A fori_loop with a traced trip count is an XLA while loop, whose condition the GPU
    # runtime reads back on the host every iteration: jax's dispatch itself would then wait.)
    @functools.partial(jax.jit, static_argnums=1)
    def long(a, n, value):
        x = a
        for _ in range(n):
            x = jnp.tanh(x @ a)
        return x * 0 + value       # exactly `value` everywhere, once the chain is done

    a = jax.device_put(jnp.full((4096, 4096), 1e-3, jnp.float32), gpu)
    long(a, 8, 0.0).block_until_ready()            # compiled
    start = time.perf_counter()
    long(a, 8, 0.0).block_until_ready()
    per_step = (time.perf_counter() - start) / 8
    n = max(8, int(0.030 / per_step))
    long(a, n, 0.0).block_until_ready()            # compiled for the trials
    return jax, long, a, n


@pytest.mark.gpu
@pytest.mark.host_timing
def test_jax_view_without_a_stream_waits_for_nothing(jax_long):
    jax, long, a, n = jax_long
    returned_early = measured = 0
    timings = []
    for trial in range(1, 11):
        result = long(a, n, float(trial))
        pending_before = not result.is_ready()
        start = time.perf_counter()
        v = view(result)
        elapsed = time.perf_counter() - start
        pending_after = not result.is_ready()
        measured += pending_before
        returned_early += pending_before and elapsed < 0.005 and pending_after
        timings.append((round(elapsed * 1e3, 3), pending_before, pending_after))
        assert v.ptr == result.unsafe_buffer_pointer() and v.readonly
        result.block_until_ready()
    assert measured >= 5, f"jax's work was done before view() was called: {timings}"
    assert returned_early >= measured - 1, f"view(x) waited for jax's work: {timings}"


@pytest.mark.gpu
@pytest.mark.host_timing
@pytest.mark.parametrize("entry_point", ["view", "to", "sync", "sync later", "from_dlpack",
                                         "from_cuda_array_interface"])
def test_jax_producer_is_ordered_before_the_consumer_without_a_host_wait(
        torch_cuda, jax_long, entry_point):
    import warnings

    torch = torch_cuda
    jax, long, a, n = jax_long
    consumer = torch.cuda.Stream()
    returned_early = measured = 0
    timings = []
    for trial in range(1, TRIALS + 1):
        result = long(a, n, float(trial))   # enqueued: still running below
        pending_before = not result.is_ready()
        start = time.perf_counter()
        if entry_point == "view":
            handed = view(result, stream=consumer)
        elif entry_point == "to":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", interop_core.plugins.ReadOnlyHandoffWarning)
                handed = interop_core.to(result, "torch", stream=consumer)
        elif entry_point == "sync":
            handed = view(result).sync(consumer)
        elif entry_point in ("from_dlpack", "from_cuda_array_interface"):
            # Both take jax's reader; with a consumer stream neither protocol waits on the host.
            handed = getattr(StridedMemoryView, entry_point)(result, stream=consumer)
        else:
            handed = view(result)        # ordered below, after the host checked the time
        elapsed = time.perf_counter() - start
        pending_after = not result.is_ready()
        if entry_point == "sync later":
            handed.sync(consumer)
        copy = _consumer_reads(torch, handed, consumer)
        consumer.synchronize()
        assert float(copy.min()) == float(trial) == float(copy.max()), f"trial {trial}"
        # Only a trial whose work was still pending when the call began says whether it waited.
        measured += pending_before
        returned_early += pending_before and elapsed < 0.005 and pending_after
        timings.append((round(elapsed * 1e3, 3), pending_before, pending_after))
    assert measured >= TRIALS // 2, f"jax's work was done before the call: {timings[:10]}"
    assert returned_early >= measured - 2, f"the host waited for jax's work: {timings[:10]}"


@pytest.mark.gpu
def test_a_torch_producer_is_ordered_before_jax_reads_the_import(torch_cuda, jax_long):
    torch = torch_cuda
    producer = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    for trial in range(1, TRIALS + 1):
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(float(trial))
            imported = interop_core.to(x, "jax")     # jax orders its stream after `producer`
        assert imported.unsafe_buffer_pointer() == x.data_ptr()
        host = np.asarray(imported)                  # jax's own read, on its own stream
        assert float(host.min()) == float(trial) == float(host.max()), f"trial {trial}"
        del imported, host


def _array_and_side_stream(framework):
    """(a device array, a new stream as a context manager, its handle, the current handle)."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch has no CUDA here")
        side = torch.cuda.Stream()
        return (torch.ones(4, device="cuda"), torch.cuda.stream(side), side.cuda_stream,
                lambda: torch.cuda.current_stream().cuda_stream)
    cupy = pytest.importorskip("cupy")
    validation_result("cupy:ndarray")   # cupy's stream function is checked before the test
    side = cupy.cuda.Stream(non_blocking=True)
    return cupy.arange(8), side, side.ptr, lambda: cupy.cuda.get_current_stream().ptr


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_a_view_remembers_the_stream_current_when_it_was_made(framework):
    x, side, handle, current = _array_and_side_stream(framework)
    with side:
        v = view(x)                     # no consumer stream: metadata only
    assert current() != handle
    assert v.producer_stream == handle
    assert v.__cuda_array_interface__["stream"] == handle


@pytest.mark.gpu
def test_the_producers_own_stream_enqueues_nothing_and_another_stream_one_wait(torch_cuda):
    torch = torch_cuda
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.ones(16, device="cuda")
    with torch.cuda.stream(side):
        before = _cuda.orderings_enqueued()
        for stream in (side, side.cuda_stream, side, torch.cuda.current_stream()):
            v = view(x, stream=stream)
            assert v.producer_stream == side.cuda_stream
        assert _cuda.orderings_enqueued() == before
        view(x, stream=other)
        assert _cuda.orderings_enqueued() == before + 1


@pytest.mark.gpu
def test_ordering_reuses_pooled_events(torch_cuda):
    torch = torch_cuda
    stream = torch.cuda.Stream()
    x = torch.ones(16, device="cuda")
    for _ in range(200):
        view(x).sync(stream)
    assert _cuda.events_created() <= torch.cuda.device_count()


@pytest.mark.gpu
def test_ordering_is_legal_during_cuda_graph_capture(torch_cuda):
    torch = torch_cuda
    x = torch.ones(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    with torch.cuda.stream(capture):
        y = x * 2               # warm up outside the graph
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=capture):
        y = x * 2
        v = view(y, stream=torch.cuda.current_stream())   # same stream: no event at all
        z = torch.from_dlpack(v) + 1
    graph.replay()
    torch.cuda.synchronize()
    assert float(z[0]) == 3.0


@pytest.mark.gpu
def test_views_from_many_threads_order_correctly(torch_cuda):
    import threading

    torch = torch_cuda
    errors = []

    def worker(value):
        try:
            producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
            x = torch.zeros(1 << 16, device="cuda")
            for _ in range(10):
                with torch.cuda.stream(producer):
                    torch.cuda._sleep(SLEEP_CYCLES // 10)
                    x.fill_(value)
                    handed = view(x, stream=consumer)
                copy = _consumer_reads(torch, handed, consumer)
                consumer.synchronize()
                assert float(copy.min()) == value
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(float(i + 1),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:2]


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_consumer_stream_on_another_device_is_ordered(torch_cuda):
    torch = torch_cuda
    producer = torch.cuda.Stream(device=0)
    consumer = torch.cuda.Stream(device=1)
    x = torch.zeros(1 << 20, device="cuda:0")
    for trial in range(1, 11):
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(float(trial))
            handed = view(x, stream=consumer)
        with torch.cuda.device(1), torch.cuda.stream(consumer):
            copy = torch.from_dlpack(handed).to("cuda:1", non_blocking=True)
        consumer.synchronize()
        assert float(copy.min()) == float(trial)


@pytest.mark.parametrize("handle", [np.int64(-1), np.int32(0), np.uint64(12345)])
def test_integers_of_other_types_are_stream_handles(handle):
    expected = None if handle == -1 else int(handle)
    assert resolve_consumer_stream(handle) == expected


def test_objects_that_only_convert_to_an_int_are_not_stream_handles():
    torch = pytest.importorskip("torch")
    for value in (torch.tensor(3), torch.tensor(True), np.True_, np.float64(1.0)):
        with pytest.raises(TypeError, match="stream must"):
            resolve_consumer_stream(value)
