# Sharded arrays: per-shard records and the collection shards() returns.

from libc.stdint cimport int64_t

from ..core._dlpack_abi cimport DLDataType
from ..core._view cimport StridedMemoryView


cdef class Shard:
    cdef readonly StridedMemoryView view   # the shard's memory; keeps its producer alive
    """StridedMemoryView: The shard's memory, on its device."""
    cdef tuple _index                      # the index as given, checked (owned tuple); made
                                           # slice(start, stop) everywhere on first read
    cdef bint _normalized                  # whether _index is slice(start, stop) everywhere
    cdef tuple _shape                      # the global shape (shared with the Shards)
    cdef readonly Py_ssize_t replica
    """int: Which copy of this block it is (0 for the first; distinct among equal blocks)."""


cdef class Shards:
    cdef tuple _items                      # the Shard records, in the producer's order (owned)
    cdef readonly tuple shape
    """tuple of int: The global array's shape."""
    cdef DLDataType _dtype                 # the global element type (every shard has it)
    cdef object _numpy_dtype               # cache for .dtype (numpy imported only when asked)
    cdef readonly object source            # what shards() read (kept alive), or None
    """object: The object the shards were read from (None when made by ``from_pieces`` alone)."""
    cdef readonly bint complete
    """bool: Whether these shards are all of the global array's shards (every one addressable)."""


cdef class ShardLayout:
    cdef readonly tuple shape
    """tuple of int: The global array's shape."""
    cdef readonly bint complete
    """bool: Whether the blocks are all of the array's shards (checked to cover the shape)."""
    cdef tuple _indices                    # per shard, its index as slice(start, stop) per
                                           # dimension (owned; shared with the Shard records)
    cdef Py_ssize_t _count                 # how many shards
    cdef int64_t* _starts                  # _count x ndim block starts; owned: one malloc'd
                                           # block holding _starts, _stops and _replicas
    cdef int64_t* _stops                   # _count x ndim block stops (inside that block)
    cdef Py_ssize_t* _replicas             # _count replica ids (inside that block)


# ShardLayout.shards without the Python argument parsing; `dtype` may be NULL (taken from the
# pieces).  `data` is a list or tuple of anything view() accepts, in the layout's order.
cdef Shards layout_shards(ShardLayout layout, object data, object stream,
                          const DLDataType* dtype, object source)

# Shards.from_pieces without the Python argument parsing; `dtype` may be NULL (taken from the
# pieces).  For compiled plugins.
cdef Shards shards_from_pieces(tuple shape, object pieces, object stream,
                              const DLDataType* dtype, bint complete, object source)

# The consumer stream for memory on (device_type, device_id): `stream` itself, or the entry of
# a {CUDA device id: stream} dict (None for host memory).  ValueError for a missing device.
cdef object stream_for(object stream, int device_type, int device_id)
