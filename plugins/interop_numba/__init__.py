"""interop-core plugin for numba's CUDA arrays.

Registers numba's exact device-array types (``DeviceNDArray``, ``MappedNDArray``,
``ManagedNDArray``, under both the built-in ``numba.cuda`` and the numba-cuda package's module
paths), numba's stream class, and the ``"numba"`` exporter.  Loading this plugin never imports
numba.

Reading
-------
Device arrays are read by this package's compiled reader (``_reader.pyx``), registered through
the public C ABI (``interop_core.h``, version 2) exactly as a third party's would be.  It reads
the arrays' public attributes (``shape``, ``strides``, ``dtype``, ``gpu_data``, ``stream``) from
C instead of building numba's ``__cuda_array_interface__`` dict.  The core validates it once per
process, before its first use: ``prepare`` checks that the producer stream it reports is the
interface's ``stream`` field, and the core reads canary device arrays with it and with the
fallback, the core's CUDA Array Interface reader, and compares them.  If anything differs, the
interface serves the rest of the process (``python -m interop_core doctor`` says why).  The
producer stream is the stream the array is bound to (none when it is bound to none), fixed for
the array's life, so the registration needs no per-object producer strategy.  The attributes
are read from the array's instance dict (numba sets them in ``__init__``; a type whose classes
define any of them as class attributes or properties is read through ``getattr``).  The pointer
value and the CUDA driver's answer for the memory kind and device are cached per pointer object
(``gpu_data``), which numba gives its value once and which cannot change allocation while it
lives (``_reader.device_cache_info()`` counts its hits and misses).

Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) "device" arrays are
``FakeCUDAArray`` objects over numpy arrays in host memory: they are read as the host memory
they are, through their ``__array_interface__`` (the core reader ``"array_interface"``), and
the exporter wraps host memory in them.
"""

from __future__ import annotations

from typing import Any

import interop_core

__all__ = ["interop_core_register", "export_numba", "producer_stream", "direct_export_status",
           "ARRAY_TYPES", "SIMULATOR_TYPES", "STREAM_TYPES"]

_MODULES = ("numba.cuda.cudadrv.devicearray", "numba_cuda.numba.cuda.cudadrv.devicearray")
#: Exact device-array types ("module:QualName", resolved lazily; absent ones never resolve).
ARRAY_TYPES = tuple(f"{module}:{name}" for module in _MODULES
                    for name in ("DeviceNDArray", "MappedNDArray", "ManagedNDArray"))
#: The CUDA simulator's array type.
SIMULATOR_TYPES = tuple(f"{prefix}.cuda.simulator.cudadrv.devicearray:FakeCUDAArray"
                        for prefix in ("numba", "numba_cuda.numba"))
#: numba's stream class (``int(stream)`` is the ``CUstream``).
STREAM_TYPES = tuple(f"{prefix}.cuda.cudadrv.driver:Stream"
                     for prefix in ("numba", "numba_cuda.numba"))


def producer_stream(obj: Any) -> int | None:
    """The ``stream`` field of ``obj``'s CUDA Array Interface (``None``: no stream bound)."""
    from . import _reader  # compiled; imports no numba

    return _reader.producer_stream(obj)


def _simulator_enabled() -> bool:
    import numba.cuda

    return bool(getattr(numba.cuda, "simulator_enabled", False)) or (
        "simulator" in getattr(numba.cuda.to_device, "__module__", ""))


def export_numba(view: Any, stream: Any = None) -> Any:
    """A numba device array over the same memory as ``view``, keeping ``view`` alive.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
        Of CUDA device, pinned host or managed memory (host memory under the CUDA simulator).
    stream : optional
        The consumer stream (ordering was done by :func:`interop_core.view`).

    Returns
    -------
    numba.cuda.cudadrv.devicearray.DeviceNDArray
        (a ``FakeCUDAArray`` under the simulator).  numba arrays cannot be read-only: ``to()``
        warns when ``view`` is.

    Raises
    ------
    BufferError
        For host memory (numba device arrays hold CUDA memory; copy with
        ``numba.cuda.to_device``), for device memory under the simulator, or for negative
        strides (``interop_core.to(x, "numba")`` hands numba a copy of such a view).
    """
    from numba import cuda

    if any(step < 0 and extent > 1 for step, extent in zip(view.strides, view.shape, strict=True)):
        raise BufferError(f"numba device arrays cannot hold negative strides (the view has "
                          f"strides {view.strides}); interop_core.to(x, 'numba') hands numba "
                          "a copy")

    if _simulator_enabled():
        if not view.is_host_accessible or view.device_type != 1:
            raise BufferError("numba's CUDA simulator holds host memory only; this view is of "
                              f"device type {view.device_type}")
        import numpy as np
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.asarray(view))
    if view.device_type not in (2, 3, 13):
        raise BufferError(
            f"cannot hand memory of device type {view.device_type} to numba without a copy: "
            "numba device arrays hold CUDA memory; copy it with numba.cuda.to_device(...) "
            "instead")
    if _direct_checked is None:
        _check_direct(cuda)
    if _direct_checked[0]:
        array = _direct(view, stream)
    else:
        array = cuda.from_cuda_array_interface(view.__cuda_array_interface__, owner=view,
                                               sync=False)
    if view.size == 0:
        # numba drops `owner` for empty arrays; hold the view anyway, as every export does.
        array._interop_core_owner = view
    return array


# The direct constructor: numba's DeviceNDArray over a MemoryPointer that owns the view, what
# numba.cuda.from_cuda_array_interface builds, without building and parsing the interface dict,
# entering numba's context manager or wrapping the interface's stream anew on every call.  It is
# compared once per process with from_cuda_array_interface on canaries (_check_direct); any
# difference sends every export through from_cuda_array_interface.
_direct_checked: tuple[bool, str] | None = None
_numba: dict = {}                 # numba's constructors, looked up by _check_direct
_streams: dict = {}               # CUstream handle -> numba external stream (bounded)
_MAX_STREAMS = 64


def _numba_stream(handle: int | None) -> Any:
    """The numba stream object for a handle, wrapped once per handle (numba's 0: none bound)."""
    if handle is None or handle == 0:    # 0, the legacy default stream, is numba's "none"
        return 0
    found = _streams.get(handle)
    if found is None:
        if len(_streams) >= _MAX_STREAMS:
            _streams.clear()
        found = _streams[handle] = _numba["external_stream"](handle)
    return found


def _direct(view: Any, stream: Any) -> Any:
    # Bound to the consumer stream when one is given, else to the producer's where the view
    # already knows it (as the interface's stream field would say), so that numba's own calls
    # on the array stay ordered; a producer that must first order itself (jax) is not asked:
    # without a stream, to() promises no synchronisation.
    handle = interop_core.resolve_consumer_stream(stream) if stream is not None else None
    if handle is None:
        handle = view._recorded_producer_stream
    shape, strides, itemsize = view.shape, view.strides_in_bytes, view.itemsize
    size = _numba["memory_size"](shape, strides, itemsize)
    memory = _numba["MemoryPointer"](_numba["context"](), _numba["devptr"](view.ptr), size=size,
                                     owner=view)
    return _numba["DeviceNDArray"](shape, strides, view.dtype, stream=_numba_stream(handle),
                                   gpu_data=memory)


def _describe(array: Any) -> tuple:
    interface = dict(array.__cuda_array_interface__)
    interface.pop("stream", None)
    return (type(array), interface, array.alloc_size, type(array.gpu_data),
            array.gpu_data.size, repr(array.gpu_data.context),
            int(array.stream) if array.stream else 0)


def _check_direct(cuda: Any) -> None:
    """Compare the direct constructor with from_cuda_array_interface once per process."""
    global _direct_checked
    try:
        import numpy as np
        from numba.cuda.cudadrv import devicearray, driver

        devptr = (driver.binding.CUdeviceptr if hasattr(getattr(driver, "binding", None),
                                                        "CUdeviceptr")
                  else driver.get_devptr_for_active_ctx)
        _numba.update(DeviceNDArray=devicearray.DeviceNDArray,
                      MemoryPointer=driver.MemoryPointer,
                      memory_size=driver.memory_size_from_info, devptr=devptr,
                      context=cuda.current_context, external_stream=cuda.external_stream)
        producer = cuda.stream()
        base = cuda.to_device(np.arange(24, dtype=np.float32).reshape(4, 6), stream=producer)
        producer.synchronize()
        for sample in (base, base[1:, ::2], base[2, 3:4], base[1:1]):
            v = interop_core.view(sample)
            for consumer in (None, cuda.stream()):
                mine = _direct(v, consumer)
                interface = dict(v.__cuda_array_interface__)
                bound_to = int(consumer) if consumer is not None else v._recorded_producer_stream
                interface["stream"] = bound_to or None
                theirs = cuda.from_cuda_array_interface(interface, owner=v, sync=False)
                if _describe(mine) != _describe(theirs):
                    _direct_checked = (False, f"direct {_describe(mine)} != "
                                              f"from_cuda_array_interface {_describe(theirs)}")
                    return
                if not np.array_equal(mine.copy_to_host(), theirs.copy_to_host()):
                    _direct_checked = (False, "the direct constructor reads other values")
                    return
    except Exception as exc:
        _direct_checked = (False, f"the check raised {type(exc).__name__}: {exc}")
        return
    _direct_checked = (True, "direct DeviceNDArray matches numba.cuda.from_cuda_array_interface")


def direct_export_status() -> tuple[bool, str] | None:
    """Whether ``to(x, "numba")`` builds arrays directly, and why (``None``: not checked yet)."""
    return _direct_checked


@interop_core.hookimpl
def interop_core_register(registry: Any) -> None:
    """Declare numba's device-array types (the compiled attribute reader, validated once), the
    simulator's array type, numba's stream type and the exporter (imports no numba)."""
    from . import _reader  # compiled; imports no numba

    reader = _reader.reader_capsule()
    for path in ARRAY_TYPES:
        # The reader's producer stream is the interface's `stream` field (checked by prepare),
        # fixed for the array's life, and so is the fallback's: no per-object strategy (a
        # launch with a consumer stream would ask it again for every array bound to none).
        registry.add_type(path, reader=reader, fallback="cuda_array_interface",
                          prepare=_reader.prepare, canaries=_reader.canaries,
                          equivalent_to=("cuda_array_interface",))
    for path in SIMULATOR_TYPES:
        registry.add_type(path, reader="array_interface")
    for path in STREAM_TYPES:
        registry.add_stream_type(path, handle=int)   # numba streams convert to their handle
    # numba's device arrays place their memory from the data pointer upwards (copy_to_host
    # raises for negative strides, and the allocation size assumes it): to() hands numba a copy
    # of a view with negative strides.  Memory kinds are checked by export_numba itself (the
    # simulator holds host memory, real numba CUDA memory).
    registry.add_exporter("numba", export_numba, types=ARRAY_TYPES + SIMULATOR_TYPES,
                          preserves_readonly=False,
                          limits=interop_core.ImportLimits(negative_strides=False))
