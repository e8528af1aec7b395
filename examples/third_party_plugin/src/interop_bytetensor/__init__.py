"""interop-core plugin for :mod:`bytetensor` (an example of a third-party plugin).

It shows both kinds of reader: ``bytetensor.ByteTensor`` is read by a Python function, and
``bytetensor.CTensor`` (metadata in a C struct) by a compiled reader written in C against the
public ABI, ``interop_core.h`` (``_creader.c``), exactly as the first-party plugins register
theirs.

Found through the ``interop_core.plugins`` entry point named ``bytetensor``.  Loading this module
never imports :mod:`bytetensor`: the type is declared by name and resolved by interop-core only
once a ``bytetensor.ByteTensor`` is actually seen; the reader and the exporter import the
framework lazily.
"""

from __future__ import annotations

import interop_core

__all__ = ["export_bytetensor", "interop_core_register", "read_bytetensor",
           "shards_of_sharded_bytetensor"]

#: DLPack device type of host memory (kDLCPU).
_KDL_CPU = 1
#: DLPack (type code, bits) -> bytetensor dtype name; a local table so exporting needs no numpy.
_DTYPE_NAMES = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (6, 8): "bool",
}


def read_bytetensor(obj, stream=None):
    """Build the view of a ``bytetensor.ByteTensor`` from its own metadata.

    Parameters
    ----------
    obj : bytetensor.ByteTensor
        The tensor (exact type; interop-core calls this reader only for it).
    stream : object, optional
        Consumer stream; host memory needs no ordering, so it is ignored.

    Returns
    -------
    interop_core.StridedMemoryView
        Over the same memory, with `obj` as its owner (kept alive by the view).

    Raises
    ------
    BufferError
        If a stride is not a whole number of elements (interop-core strides are in elements).
    """
    itemsize = obj.itemsize
    strides = []
    for stride in obj.strides:
        if stride % itemsize:
            raise BufferError(f"ByteTensor stride of {stride} bytes is not a multiple of its "
                              f"itemsize {itemsize}")
        strides.append(stride // itemsize)
    return interop_core.StridedMemoryView.from_pointer(
        obj.data_ptr, obj.shape, tuple(strides), dtype=obj.dtype, device=(_KDL_CPU, 0),
        readonly=obj.readonly, owner=obj)


def export_bytetensor(view, stream=None):
    """Hand a view over to bytetensor: a ``ByteTensor`` over the same memory, no copy.

    Parameters
    ----------
    view : interop_core.StridedMemoryView
        Any host-accessible view whose dtype bytetensor supports.
    stream : object, optional
        Ignored (host memory).

    Returns
    -------
    bytetensor.ByteTensor
        Shares `view`'s memory and keeps it alive; read-only when `view` is.

    Raises
    ------
    BufferError
        If the memory is not host-accessible (bytetensor lives on the CPU only).
    TypeError
        If bytetensor has no dtype for the view's element type.
    """
    import bytetensor  # lazy: only an actual export needs the framework

    if not view.is_host_accessible:
        raise BufferError(f"bytetensor holds host memory only; this view lives on DLPack "
                          f"device {(view.device_type, view.device_id)}: copy it to the host "
                          f"first")
    code, bits, lanes = view.dlpack_dtype
    name = _DTYPE_NAMES.get((code, bits)) if lanes == 1 else None
    if name is None:
        raise TypeError(f"bytetensor has no dtype for DLPack dtype {view.dlpack_dtype}")
    itemsize = view.itemsize
    shape = view.shape
    strides = view.strides_in_bytes
    # The bytes the elements span, from the lowest-addressed element to past the highest.
    low = sum(s * (n - 1) for s, n in zip(strides, shape, strict=True) if s < 0)
    high = sum(s * (n - 1) for s, n in zip(strides, shape, strict=True) if s > 0) + itemsize
    span = 0 if view.size == 0 else high - low
    flat = interop_core.StridedMemoryView.from_pointer(
        view.ptr + (low if span else 0), (span,), dtype="uint8", device=(_KDL_CPU, 0),
        readonly=view.readonly, owner=view)
    # memoryview(flat) keeps `flat` alive, which keeps `view` and so the original owner alive.
    return bytetensor.ByteTensor(memoryview(flat), shape, name, strides, -low if span else 0,
                                 view.readonly)


def shards_of_sharded_bytetensor(obj, stream=None):
    """The shards of a ``bytetensor.ShardedByteTensor``: one per row block.

    Parameters
    ----------
    obj : bytetensor.ShardedByteTensor
    stream : object, optional
        Passed on (host memory needs no ordering).

    Returns
    -------
    interop_core.Shards
        Each block viewed through this plugin's reader, located by its row offset; the blocks
        are all of the tensor, so ``complete=True`` has interop-core check that they tile it.
    """
    rest = tuple(slice(None) for _ in obj.shape[1:])
    pieces = [(block, (slice(offset, offset + block.shape[0]), *rest))
              for block, offset in zip(obj.blocks, obj.offsets, strict=True)]
    return interop_core.Shards.from_pieces(obj.shape, pieces, stream=stream, dtype=obj.dtype,
                                           complete=True, source=obj)


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare ``bytetensor.ByteTensor``, its reader, the ``"bytetensor"`` exporter, and
    ``bytetensor.ShardedByteTensor`` as a sharded type.

    Parameters
    ----------
    registry : interop_core.plugins.PluginRegistrar
        Records the declarations for this plugin; called once, never per object.
    """
    from . import _creader  # the compiled reader (C, no bytetensor import)

    registry.add_type("bytetensor:ByteTensor", reader=read_bytetensor)
    registry.add_type("bytetensor:CTensor", reader=_creader.reader_capsule())
    registry.add_exporter("bytetensor", export_bytetensor, types=("bytetensor:ByteTensor",),
                          preserves_readonly=True)
    registry.add_sharded_type("bytetensor:ShardedByteTensor", shards_of_sharded_bytetensor)
