# Sharded arrays: one record per addressable shard, made and checked in C.
#
# shards(x) looks up x's exact type among the sharded types plugins declared
# (registry.add_sharded_type).  The plugin's callable asks its framework for the local shards
# (jax: its per-device arrays; torch: the DTensor's local tensor and its offset) and hands the
# pieces to a ShardLayout, which views each one and checks that they fit the global shape:
# inside it, the extents the data has, no two different blocks overlapping, equal blocks told
# apart by their replica ids, and, when the pieces are all of the array's shards, covering it.
# A layout is checked once and reused for every array laid out the same way (the jax plugin
# keeps one per sharding and global shape); Shards.from_pieces makes one and uses it once.  Per
# shard that is one view (or a view a compiled plugin made itself), a few integer compares and
# one small object, so the per-shard cost stays close to a single-device view().  A type no
# plugin declares is viewed as one single-device array: one shard covering everything.
#
# A plugin's sharded path may read its framework's internals, as a reader may: it then declares
# a fallback on the documented API, and the core's one validation mechanism
# (registry/_validation.py) compares the two on canaries on the type's first shards().

from ..core cimport _refcount  # 64-bit reference-count increments: see the file
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
cimport cython
from cpython.number cimport PyNumber_Index
from libc.stdint cimport int64_t, intptr_t
from libc.stdlib cimport free, malloc

from ..core._dlpack_abi cimport DLDataType
from ..core._dtypes cimport describe_dtype, dtype_from_object, dtype_to_numpy
from ..core._view cimport StridedMemoryView
from ..cuda._streams cimport canonical_stream

from ..registry._registry cimport view_object

from ..registry import _validation

__all__ = ["Shard", "Shards", "ShardLayout", "shards", "check_stream_argument",
           "stream_for_device", "ShardedEntry", "new_sharded_entry", "compare_shards",
           "set_sharded_types", "sharded_entry_for", "set_miss_handler"]

cdef extern from "Python.h":
    bint PySlice_Check(object o)
    object PySlice_New(object start, object stop, object step)
    ctypedef struct PySliceObject:
        PyObject* start
        PyObject* stop
        PyObject* step

cdef enum:
    KDL_CPU = 1
    KDL_CUDA = 2
    KDL_CUDA_MANAGED = 13


cdef object stream_for(object stream, int device_type, int device_id):
    if type(stream) is not dict:
        return stream
    if device_type != KDL_CUDA and device_type != KDL_CUDA_MANAGED:
        return None
    found = (<dict> stream).get(device_id, _MISSING)
    if found is _MISSING:
        raise ValueError(
            f"stream is a dict of per-device streams, but it has no entry for CUDA device "
            f"{device_id}, where a shard lives (keys: {sorted((<dict> stream).keys())})")
    return found


cdef object _MISSING = object()   # module-owned sentinel: "no such key"


def check_stream_argument(stream):
    """Refuse a malformed ``stream=`` of ``to(shards, ...)`` (one stream, or a dict of them by
    CUDA device id) as one view's is refused, whatever devices the shards are on.

    Raises
    ------
    TypeError, ValueError
        As for a view's ``stream=``; for a dict, naming the key.
    """
    cdef intptr_t handle = 0
    if type(stream) is not dict:
        canonical_stream(stream, &handle)
        return
    for device_id, each in (<dict> stream).items():
        if type(device_id) is not int or device_id < 0:
            raise TypeError(f"stream is a dict of per-device streams, keyed by CUDA device id "
                            f"(an int >= 0), got the key {device_id!r}")
        try:
            canonical_stream(each, &handle)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"stream[{device_id}]: {exc}") from None


def stream_for_device(stream, device):
    """The consumer stream for memory on ``device``, given what a caller passed as ``stream=``.

    ``shards()`` and ``to(shards, ...)`` take either one stream for every shard or a dict
    ``{CUDA device id: stream}``; assemblers of plugins use this to pick each shard's.

    Parameters
    ----------
    stream : None, int, stream object, or dict
    device : tuple of int
        ``(device_type, device_id)`` in DLPack terms (``Shard.device``).

    Returns
    -------
    None, int or stream object
        ``stream`` itself unless it is a dict; for a dict, the entry of the CUDA device
        (``None`` for host memory, which needs no ordering).

    Raises
    ------
    ValueError
        If ``stream`` is a dict without an entry for that CUDA device.
    """
    return stream_for(stream, device[0], device[1])


cdef StridedMemoryView _view_ordered(object data, object stream):
    """view(data) ordered on the consumer stream the shard's device takes."""
    cdef StridedMemoryView v
    if stream is None:
        return <StridedMemoryView> view_object(data, None)
    if type(stream) is dict:
        # The device is known only once the piece is read: read it, then read it again with
        # that device's stream (readers order at read time; jax's does so through DLPack).
        v = <StridedMemoryView> view_object(data, None)
        stream = stream_for(stream, v.rec.device_type, v.rec.device_id)
        if stream is None:
            return v
    if type(data) is StridedMemoryView:
        return (<StridedMemoryView> data).sync(stream)   # view() returns a view unordered
    return <StridedMemoryView> view_object(data, stream)


# A shards() call makes one Shard per shard and usually drops them soon: a freelist saves the
# allocator round trip.
@cython.freelist(64)
cdef class Shard:
    """One addressable shard of a sharded array: its memory, its device, where it sits.

    Made by :func:`interop_core.shards` and :meth:`Shards.from_pieces`, never directly.

    Attributes
    ----------
    view : StridedMemoryView
        The shard's memory on its device, zero-copy, ordered on the consumer stream given.
    device : tuple of int
        ``(device_type, device_id)`` in DLPack terms (1 host, 2 CUDA, ...).
    index : tuple of slice
        ``slice(start, stop)`` per dimension: ``global_array[index]`` is this shard.
    replica : int
        Which copy of this block it is: 0, 1, ... among shards with the same ``index``.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Shard records are made by interop_core.shards() or "
                        "Shards.from_pieces(), not directly")

    @property
    def index(self):
        """tuple of slice: ``slice(start, stop)`` per dimension, locating the shard."""
        if not self._normalized:
            # Made on first use: a producer's index may say slice(None) for a whole dimension.
            self._index = tuple([slice(*s.indices(n)[:2])
                                 for s, n in zip(self._index, self._shape)])
            self._normalized = True
        return self._index

    @property
    def device(self):
        """tuple of int: ``(device_type, device_id)`` of the shard's memory (DLPack terms)."""
        return (self.view.rec.device_type, self.view.rec.device_id)

    def __repr__(self):
        where = ", ".join(f"{s.start}:{s.stop}" for s in self.index)
        return (f"Shard(index=[{where}], replica={self.replica}, "
                f"device={self.view.rec.device_type}:{self.view.rec.device_id}, "
                f"shape={self.view.shape})")


cdef Shard _shard_new(StridedMemoryView v, tuple index, bint normalized, tuple shape,
                      Py_ssize_t replica):
    cdef Shard s = Shard.__new__(Shard)
    s.view = v
    s._index = index
    s._normalized = normalized
    s._shape = shape
    s.replica = replica
    return s


cdef tuple _full_index(tuple shape):
    return tuple([PySlice_New(0, n, None) for n in shape])


cdef tuple _checked_index(object index, tuple shape, Py_ssize_t k, int64_t* starts,
                          int64_t* stops, bint* normalized):
    """`index` checked, as a tuple, its bounds written to starts/stops; `normalized` tells
    whether it already says slice(start, stop) everywhere."""
    cdef Py_ssize_t ndim = PyTuple_GET_SIZE(shape)
    cdef Py_ssize_t d
    cdef int64_t extent
    cdef PySliceObject* s
    cdef bint rebuild = False
    if type(index) is not tuple:
        if not isinstance(index, (tuple, list)):
            raise TypeError(f"shard {k}: its index must be a tuple of slices, got "
                            f"{type(index).__name__}")
        index = tuple(index)
    if PyTuple_GET_SIZE(index) != ndim:
        raise ValueError(f"shard {k}: its index {index} has {PyTuple_GET_SIZE(index)} entries "
                         f"for a {ndim}-d global shape {shape}")
    for d in range(ndim):
        item = <object> PyTuple_GET_ITEM(index, d)
        if not PySlice_Check(item):
            raise TypeError(f"shard {k}: index[{d}] must be a slice, got "
                            f"{type(item).__name__} ({item!r})")
        s = <PySliceObject*> item
        extent = <object> PyTuple_GET_ITEM(shape, d)
        if <object> s.step is not None and <object> s.step != 1:
            raise ValueError(f"shard {k}: index[{d}] = {item} has a step; shards are "
                             "contiguous blocks")
        try:
            start_at = 0 if <object> s.start is None else PyNumber_Index(<object> s.start)
            stop_at = extent if <object> s.stop is None else PyNumber_Index(<object> s.stop)
        except TypeError:
            raise TypeError(f"shard {k}: index[{d}] = {item} must have integer bounds") from None
        if not (0 <= start_at <= stop_at <= extent):
            raise ValueError(f"shard {k}: index[{d}] = {item} does not lie within 0:{extent} "
                             f"(global shape {shape})")
        starts[d] = start_at
        stops[d] = stop_at
        if <object> s.start is None or <object> s.stop is None or <object> s.step is not None:
            rebuild = True
    normalized[0] = not rebuild
    return <tuple> index


cdef str _index_text(const int64_t* starts, const int64_t* stops, Py_ssize_t ndim):
    return "[" + ", ".join([f"{starts[d]}:{stops[d]}" for d in range(ndim)]) + "]"


cdef int _check_tiling(ShardLayout layout) except -1:
    """Different blocks must not overlap, equal ones must differ in replica id, and when the
    shards are all of the array's, the distinct blocks must cover the global shape."""
    cdef Py_ssize_t n = layout._count, ndim = PyTuple_GET_SIZE(layout.shape)
    cdef Py_ssize_t i, j, d
    cdef const int64_t* starts = layout._starts
    cdef const int64_t* stops = layout._stops
    cdef const int64_t* a
    cdef const int64_t* b
    cdef int64_t lo, hi, volume, covered = 0, total = 1
    cdef bint same, overlap, duplicate
    shape = layout.shape
    for d in range(ndim):
        total *= <int64_t> <object> PyTuple_GET_ITEM(shape, d)
    for i in range(n):
        volume = 1
        for d in range(ndim):
            volume *= stops[i * ndim + d] - starts[i * ndim + d]
        duplicate = False
        for j in range(i):
            same = overlap = True
            for d in range(ndim):
                a = starts + i * ndim + d
                b = starts + j * ndim + d
                if a[0] != b[0] or stops[i * ndim + d] != stops[j * ndim + d]:
                    same = False
                lo = a[0] if a[0] > b[0] else b[0]
                hi = stops[i * ndim + d] if stops[i * ndim + d] < stops[j * ndim + d] else stops[j * ndim + d]
                if lo >= hi:
                    overlap = False
            # Empty blocks overlap nothing, but equal ones still need distinct replica ids.
            if not same and (volume == 0 or not overlap):
                continue
            if same:
                if layout._replicas[i] == layout._replicas[j]:
                    raise ValueError(
                        f"shards {j} and {i} are the same block "
                        f"{_index_text(starts + i * ndim, stops + i * ndim, ndim)} with the same "
                        f"replica id {layout._replicas[i]}: copies of a block need "
                        "distinct replica ids")
                duplicate = True
            else:
                raise ValueError(
                    f"shards {j} {_index_text(starts + j * ndim, stops + j * ndim, ndim)} and "
                    f"{i} {_index_text(starts + i * ndim, stops + i * ndim, ndim)} overlap "
                    f"without being the same block: they do not tile the global shape {shape}")
        if not duplicate:
            covered += volume
    if layout.complete and covered != total:
        raise ValueError(
            f"the shards cover {covered} of the {total} elements of the global shape {shape}: "
            "they do not tile it")
    return 0


cdef int _fill_layout(ShardLayout layout, tuple shape, list indices, list replicas,
                      bint complete) except -1:
    """`layout` over `indices` (and `replicas`, or all 0), each index checked against `shape`;
    the tiling is checked by the caller (from_pieces checks the data first)."""
    cdef Py_ssize_t n = len(indices), ndim = PyTuple_GET_SIZE(shape), k
    cdef Py_ssize_t width = ndim if ndim else 1
    cdef bint normalized
    cdef Py_ssize_t replica
    if replicas is not None and len(replicas) != n:
        raise ValueError(f"{len(replicas)} replica ids for {n} shard indices")
    free(layout._starts)         # __init__ called again: start afresh
    layout._starts = NULL
    layout._count = 0
    layout._indices = ()
    layout.shape = shape
    layout.complete = complete
    # One block of memory: starts, stops (n x ndim each), then the replica ids.
    layout._starts = <int64_t*> malloc(2 * n * width * sizeof(int64_t)
                                       + (n if n else 1) * sizeof(Py_ssize_t))
    if layout._starts == NULL:
        raise MemoryError()
    layout._stops = layout._starts + n * width
    layout._replicas = <Py_ssize_t*> (layout._stops + n * width)
    normalized_indices = []
    for k in range(n):
        index = _checked_index(indices[k], shape, k, layout._starts + k * ndim,
                               layout._stops + k * ndim, &normalized)
        if not normalized:
            # Made once per layout: a producer's index may say slice(None) for a whole dimension.
            index = tuple([PySlice_New(layout._starts[k * ndim + d], layout._stops[k * ndim + d],
                                       None) for d in range(ndim)])
        normalized_indices.append(index)
        layout._replicas[k] = 0 if replicas is None else _replica_id(replicas[k], k)
    layout._indices = tuple(normalized_indices)
    layout._count = n
    return 0


cdef Py_ssize_t _replica_id(object value, Py_ssize_t k) except -1:
    """Shard `k`'s replica id, checked: an int (bool excluded) from 0 up to 2**62."""
    if isinstance(value, bool):
        raise TypeError(f"shard {k}: its replica id must be an int, got {value!r}")
    try:
        replica = PyNumber_Index(value)
    except TypeError:
        raise TypeError(f"shard {k}: its replica id must be an int, got "
                        f"{type(value).__name__} ({value!r})") from None
    if replica < 0:
        raise ValueError(f"shard {k}: replica id {replica} is negative")
    if replica > (1 << 62):
        raise ValueError(f"shard {k}: replica id {replica} is larger than 2**62")
    return replica


cdef Shards layout_shards(ShardLayout layout, object data, object stream,
                          const DLDataType* dtype, object source):
    cdef Shards result = Shards.__new__(Shards)
    cdef Py_ssize_t n = layout._count, ndim = PyTuple_GET_SIZE(layout.shape), k, d
    cdef const int64_t* starts
    cdef const int64_t* stops
    cdef StridedMemoryView v
    cdef bint have_dtype = dtype != NULL
    cdef DLDataType want
    if have_dtype:
        want = dtype[0]
    if type(data) is not list and type(data) is not tuple:
        data = list(data)
    if len(data) != n:
        raise ValueError(f"the layout has {n} shard(s), but {len(data)} piece(s) of data were "
                         "given")
    shape = layout.shape
    items = PyTuple_New(n)
    for k in range(n):
        item = data[k]
        if stream is None and type(item) is StridedMemoryView:
            v = <StridedMemoryView> item      # what view() returns for a view (compiled plugins)
        else:
            try:
                v = _view_ordered(item, stream)
            except (TypeError, ValueError, BufferError) as exc:
                raise type(exc)(f"shard {k}: its data cannot be viewed: {exc}") from exc
        starts = layout._starts + k * ndim
        stops = layout._stops + k * ndim
        if v.rec.ext.ndim != ndim:
            raise ValueError(f"shard {k}: its data is {v.rec.ext.ndim}-d, the global "
                             f"shape {shape} is {ndim}-d")
        for d in range(ndim):
            if v.rec.ext.shape[d] != stops[d] - starts[d]:
                raise ValueError(
                    f"shard {k}: its index {_index_text(starts, stops, ndim)} spans "
                    f"{tuple([stops[e] - starts[e] for e in range(ndim)])} but its data has "
                    f"shape {v.shape}")
        if not have_dtype:
            want = v.rec.dtype
            have_dtype = True
        elif (v.rec.dtype.code != want.code or v.rec.dtype.bits != want.bits
              or v.rec.dtype.lanes != want.lanes):
            raise ValueError(f"shard {k}: its dtype {describe_dtype(v.rec.dtype)} differs "
                             f"from the global dtype {describe_dtype(want)}")
        shard = _shard_new(v, <tuple> PyTuple_GET_ITEM(layout._indices, k), True, shape,
                           layout._replicas[k])
        Py_INCREF(shard)                      # PyTuple_SET_ITEM steals a reference
        PyTuple_SET_ITEM(items, k, shard)
    if not have_dtype:
        raise ValueError("no pieces were given, so the global dtype is unknown: pass dtype=")
    result._items = items
    result.shape = shape
    result._dtype = want
    result.complete = layout.complete
    result.source = source
    return result


cdef Shards shards_from_pieces(tuple shape, object pieces, object stream,
                              const DLDataType* dtype, bint complete, object source):
    cdef Py_ssize_t k = 0
    data, indices, replicas = [], [], []
    for piece in pieces:
        if type(piece) is tuple or type(piece) is list:
            if not 2 <= len(piece) <= 3:
                raise TypeError(f"shard {k} must be given as a (data, index) or (data, "
                                f"index, replica) tuple, got {len(piece)} items")
            data.append(piece[0])
            indices.append(piece[1])
            replicas.append(piece[2] if len(piece) == 3 else 0)
        else:
            try:
                data.append(piece.data)
                indices.append(piece.index)
                replicas.append(piece.replica_id)
            except AttributeError:
                raise TypeError(
                    f"shard {k} must be given as a (data, index[, replica]) tuple or an "
                    f"object with data, index and replica_id attributes, got "
                    f"{type(piece).__name__}") from None
        k += 1
    cdef ShardLayout layout = ShardLayout.__new__(ShardLayout)
    _fill_layout(layout, shape, indices, replicas, complete)
    # The data first, then the tiling: a piece whose data disagrees with its index is named as
    # such rather than as a gap or an overlap.
    result = layout_shards(layout, data, stream, dtype, source)
    _check_tiling(layout)
    return result


cdef class ShardLayout:
    """Where each shard of a sharded array sits, checked once, for any array laid out so.

    A framework's layout object (a jax ``Sharding`` over a global shape, say) puts the same
    blocks on the same devices for every array it lays out.  A plugin makes one
    ``ShardLayout`` per such layout and calls :meth:`shards` with each array's per-device
    pieces: the indices, replica ids and tiling are checked here once, and per call only each
    piece's view, extents and dtype.  :meth:`Shards.from_pieces` is a layout made and used once.

    Parameters
    ----------
    shape : tuple of int
        The global array's shape.
    indices : iterable of tuple of slice
        Per shard, where it sits: ``slice(start, stop)`` per dimension (``slice(None)`` for a
        whole dimension; no steps).
    replicas : iterable of int, optional
        Per shard, its replica id (default all 0; copies of the same block need distinct ids).
    complete : bool, optional
        The shards are all of the array's shards: check that they cover the global shape.

    Raises
    ------
    TypeError
        If an index is not a tuple of slices with integer bounds.
    ValueError
        If the blocks do not tile the global shape: an index outside it or with a step, two
        different blocks overlapping, two copies of a block with the same replica id, a negative
        replica id, or (``complete=True``) blocks not covering the shape.
    """

    def __init__(self, shape, indices, replicas=None, *, bint complete=False):
        _fill_layout(self, _as_shape(shape), list(indices),
                     None if replicas is None else list(replicas), complete)
        _check_tiling(self)

    def __dealloc__(self):
        free(self._starts)       # starts, stops and replica ids share one allocation

    @property
    def indices(self):
        """tuple of tuple of slice: Per shard, ``slice(start, stop)`` per dimension."""
        return self._indices

    @property
    def replicas(self):
        """tuple of int: Per shard, its replica id."""
        return tuple([self._replicas[k] for k in range(self._count)])

    def __len__(self):
        return self._count

    def shards(self, data, stream=None, source=None, *, dtype=None):
        """The :class:`Shards` of one array laid out so: ``data[k]`` is shard ``k``'s memory.

        Parameters
        ----------
        data : sequence
            Per shard, in the layout's order, anything :func:`interop_core.view` accepts (a
            :class:`~interop_core.StridedMemoryView` is taken as it is when ``stream`` is None).
        stream : None, int, stream object, or dict, optional
            The consumer stream every piece is ordered on, or ``{CUDA device id: stream}``.
        source : object, optional
            The sharded object the pieces belong to (kept alive as ``Shards.source``).
        dtype : optional
            The global element type; needed only for a layout of no shards.

        Returns
        -------
        Shards

        Raises
        ------
        ValueError
            If the number of pieces differs from the layout's, or a piece's rank, extents or
            dtype differ from what its index and the other pieces say.
        TypeError
            If a piece cannot be viewed.
        """
        cdef DLDataType want
        if dtype is not None:
            dtype_from_object(dtype, &want)
        return layout_shards(self, data, stream, &want if dtype is not None else NULL, source)

    def __repr__(self):
        cdef Py_ssize_t k, ndim = PyTuple_GET_SIZE(self.shape)
        blocks = ", ".join([_index_text(self._starts + k * ndim, self._stops + k * ndim, ndim)
                            for k in range(self._count)])
        return (f"ShardLayout(shape={self.shape}, {self._count} shard(s): {blocks}, "
                f"complete={bool(self.complete)})")


@cython.freelist(16)
cdef class Shards:
    """The addressable shards of a sharded array, with its global shape and dtype.

    A read-only sequence of :class:`Shard` records (``len``, indexing, iteration), as
    :func:`interop_core.shards` returns it.  ``interop_core.to(shards, "jax", sharding=...)``
    assembles a jax global array from them, ``to(shards, "torch")`` per-device torch tensors
    (or a DTensor), any other target one object per shard.

    Attributes
    ----------
    shape : tuple of int
        The global array's shape.
    dtype : numpy.dtype
        The element type of every shard (numpy imported on first access).
    dlpack_dtype : tuple of int
        The element type as a DLPack ``(code, bits, lanes)`` triple.
    complete : bool
        True when these are all of the array's shards (a single process holds every device),
        False when other processes hold the rest (``jax.distributed``, ``torch.distributed``).
    source : object
        The object the shards were read from, or None.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Shards are made by interop_core.shards() or Shards.from_pieces()")

    @staticmethod
    def from_pieces(shape, pieces, *, stream=None, dtype=None, bint complete=False,
                    source=None):
        """Shards from local pieces of a global array: the constructor plugins and users call.

        Parameters
        ----------
        shape : tuple of int
            The global array's shape.
        pieces : iterable
            Per shard, a ``(data, index)`` or ``(data, index, replica)`` tuple, or an object
            with ``data``, ``index`` and ``replica_id`` attributes (as jax's ``Shard``):
            ``data`` anything :func:`interop_core.view` accepts (a tensor of any framework, a
            view), ``index`` a tuple of slices locating it in the global array
            (``slice(None)`` for a whole dimension; no steps), ``replica`` its replica id
            (default 0; copies of the same block need distinct ids).
        stream : None, int, stream object, or dict, optional
            The consumer stream every piece is ordered on (see the stream contract), or a dict
            ``{CUDA device id: stream}`` giving each device's; ``None``: no synchronisation.
        dtype : optional
            The global element type (any spelling :mod:`interop_core.dtypes` accepts).
            Needed only when there are no pieces; otherwise every piece must have it.
        complete : bool, optional
            The pieces are all of the array's shards: check that they cover the global shape.
        source : object, optional
            The sharded object the pieces belong to (kept alive; assemblers may reuse its
            sharding).

        Returns
        -------
        Shards

        Raises
        ------
        TypeError
            If a piece is neither a 2- or 3-tuple nor a shard-like object, an index is not a
            tuple of slices, or a piece cannot be viewed.
        ValueError
            If the pieces do not tile the global shape: an index outside it or with a step,
            an extent differing from the piece's data, a dtype or rank differing from the
            global one, two different blocks overlapping, two copies of a block with the same
            replica id, or (``complete=True``) blocks not covering the shape.
        """
        cdef DLDataType want
        if dtype is not None:
            dtype_from_object(dtype, &want)
        return shards_from_pieces(_as_shape(shape), pieces, stream,
                                  &want if dtype is not None else NULL, complete, source)

    @property
    def dtype(self):
        """numpy.dtype: The element type (numpy, and ml_dtypes where needed, imported here)."""
        if self._numpy_dtype is None:
            self._numpy_dtype = dtype_to_numpy(self._dtype)
        return self._numpy_dtype

    @property
    def dlpack_dtype(self):
        """tuple of int: The element type as a DLPack ``(code, bits, lanes)`` triple."""
        return (self._dtype.code, self._dtype.bits, self._dtype.lanes)

    @property
    def ndim(self):
        """int: Number of dimensions of the global array."""
        return PyTuple_GET_SIZE(self.shape)

    def __len__(self):
        return PyTuple_GET_SIZE(self._items)

    def __getitem__(self, key):
        """The shard at ``key`` (an int), or a tuple of shards (a slice), as a tuple does."""
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __reversed__(self):
        return reversed(self._items)

    def __contains__(self, item):
        return item in self._items

    def index(self, item, *args):
        """Position of ``item`` (a :class:`Shard`) among the shards, as ``tuple.index``."""
        return self._items.index(item, *args)

    def count(self, item):
        """How many times ``item`` occurs, as ``tuple.count``."""
        return self._items.count(item)

    def __repr__(self):
        devices = ", ".join([f"{s.view.device_type}:{s.view.device_id}" for s in self._items])
        return (f"Shards(shape={self.shape}, dtype={describe_dtype(self._dtype)}, "
                f"{PyTuple_GET_SIZE(self._items)} shard(s) on [{devices}], "
                f"complete={bool(self.complete)})")


cdef tuple _as_shape(object shape):
    cdef Py_ssize_t d
    if type(shape) is tuple:    # the common case: a framework's shape tuple, taken as it is
        for d in range(PyTuple_GET_SIZE(shape)):
            item = <object> PyTuple_GET_ITEM(shape, d)
            if type(item) is not int or item < 0 or item >= (1 << 62):
                break
        else:
            result = <tuple> shape
            _check_volume(result)
            return result
    try:
        items = list(shape)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__}") from None
    extents = []
    for d, n in enumerate(items):
        if isinstance(n, bool):
            raise TypeError(f"shape {tuple(items)}: extent {d} is {n!r}, not an int")
        try:
            extents.append(PyNumber_Index(n))
        except TypeError:
            # A float would be truncated silently by int(): refuse it instead.
            raise TypeError(f"shape {tuple(items)}: extent {d} is {n!r} "
                            f"({type(n).__name__}), not an int") from None
    result = tuple(extents)
    for n in result:
        if n < 0:
            raise ValueError(f"shape {result} has a negative extent")
    _check_volume(result)
    return result


cdef extern from *:
    """
    #define ic_shards_mul_ovf(a, b, out) __builtin_mul_overflow((a), (b), (out))
    """
    bint _mul_overflows "ic_shards_mul_ovf"(int64_t a, int64_t b, int64_t* out) noexcept


cdef int _check_volume(tuple shape) except -1:
    """The global shape's volume fits int64 (and with it every piece's).  Extents are ints
    from 0 up to 2**62 here (larger ones fail the product anyway)."""
    cdef int64_t volume = 1
    cdef bint overflow = False
    cdef Py_ssize_t d
    for d in range(PyTuple_GET_SIZE(shape)):
        n = <object> PyTuple_GET_ITEM(shape, d)
        if n == 0:
            return 0
        if n >= (1 << 62) or _mul_overflows(volume, <int64_t> n, &volume):
            overflow = True
    if overflow:
        raise ValueError(f"shape {shape} has more elements than fit in int64")
    return 0


# --- which types are sharded: declared by plugins, looked up per type ---------------------------

cdef class ShardedEntry:
    """How objects of one sharded type yield their shards (what a plugin declared)."""

    cdef readonly object shards        # callable(obj, stream) -> Shards (owned reference)
    """callable: ``shards(obj, stream) -> Shards``."""
    cdef readonly object plugin        # name of the plugin that declared it
    """str or None: The plugin that declared it."""
    cdef readonly bint subclasses
    """bool: Whether subclasses of the type use it too."""
    cdef readonly object type_path
    """str or None: The type as declared, ``"module:QualName"``."""
    cdef readonly ShardedEntry fallback  # owned: replaces this one when its validation fails
    """ShardedEntry or None: The documented path, installed instead when validation fails."""
    cdef readonly object prepare       # callable() -> None / str / dict, run once (validation)
    """callable or None: The plugin's own check, run once before the first use."""
    cdef readonly object canaries      # callable() -> iterable of objects (validation)
    """callable or None: Objects this entry must split exactly as its fallback does."""


def new_sharded_entry(shards, plugin=None, subclasses=False, type_path=None, fallback=None,
                      prepare=None, canaries=None):
    """A :class:`ShardedEntry` (for :mod:`interop_core.plugins`).

    ``fallback``, ``prepare`` and ``canaries`` declare a fast path built on undocumented
    layouts, validated once per process as readers are (:mod:`interop_core.registry._validation`).
    """
    if not callable(shards):
        raise TypeError(f"shards must be callable (obj, stream) -> Shards, got "
                        f"{type(shards).__name__}")
    for name, value in (("fallback", fallback), ("prepare", prepare), ("canaries", canaries)):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    if (prepare is not None or canaries is not None) and fallback is None:
        raise TypeError("prepare= and canaries= validate a fast path against its fallback=: "
                        "give fallback= too")
    cdef ShardedEntry entry = ShardedEntry.__new__(ShardedEntry)
    entry.shards = shards
    entry.plugin = plugin
    entry.subclasses = bool(subclasses)
    entry.type_path = type_path
    entry.prepare = prepare
    entry.canaries = canaries
    if fallback is not None:
        entry.fallback = new_sharded_entry(fallback, plugin, subclasses, type_path)
    return entry


def compare_shards(ShardedEntry entry not None, ShardedEntry reference not None, obj):
    """How ``entry`` and ``reference`` split ``obj`` differently (validation), or None.

    Returns
    -------
    str or None
        The first difference: the global shape, dtype or completeness, the number of shards,
        or, shard by shard, its view (pointer, shape, strides, dtype, device, read-only flag),
        index or replica id; ``None`` when they agree.
    """
    got = entry.shards(obj, None)
    want = reference.shards(obj, None)
    what = f"{type(obj).__qualname__} of shape {getattr(want, 'shape', None)}"
    if type(got) is not Shards or type(want) is not Shards:
        return f"{what}: got {type(got).__name__} and {type(want).__name__}, not Shards"
    a = (got.shape, got.dlpack_dtype, got.complete, len(got))
    b = (want.shape, want.dlpack_dtype, want.complete, len(want))
    if a != b:
        return f"{what}: (shape, dtype, complete, count) {a} != {b}"
    for k, (mine, theirs) in enumerate(zip(got, want)):
        a = _shard_key(mine)
        b = _shard_key(theirs)
        if a != b:
            return f"{what}, shard {k}: {a} != {b}"
    return None


cdef tuple _shard_key(Shard s):
    v = s.view
    return (v.ptr, v.shape, v.strides, v.dlpack_dtype, (v.device_type, v.device_id),
            v.readonly, tuple([(i.start, i.stop) for i in s.index]), s.replica)


cdef dict _REGISTERED = {}    # type -> ShardedEntry, as the plugins' winners declare them
cdef dict _DECIDED = {}       # type -> ShardedEntry or _PLAIN, decided on first sight
cdef object _PLAIN = object() # module-owned sentinel: "no plugin shards this type"
cdef object _miss_handler = None   # interop_core.plugins._on_miss (discovery, lazy types)


def set_sharded_types(dict entries):
    """Replace the declared sharded types (``{type: ShardedEntry}``) and forget decisions."""
    for t, entry in entries.items():
        if not isinstance(t, type) or not isinstance(entry, ShardedEntry):
            raise TypeError(f"expected {{type: ShardedEntry}}, got {t!r}: {entry!r}")
    _REGISTERED.clear()
    _REGISTERED.update(entries)
    _DECIDED.clear()


def set_miss_handler(handler):
    """Install ``handler(type) -> bool``, called the first time a type is seen here."""
    global _miss_handler
    _miss_handler = handler


def sharded_entry_for(t):
    """The :class:`ShardedEntry` used for objects of exactly ``t``, or None (viewed whole)."""
    if not isinstance(t, type):
        raise TypeError(f"expected a type, got {type(t).__name__}")
    found = _decide(<type> t)     # a cast: types with a metaclass (torch.Tensor) are types too
    return None if found is _PLAIN else found


cdef object _decide(type t):
    found = _DECIDED.get(t)
    if found is not None:
        return found
    if _miss_handler is not None:
        _miss_handler(t)         # may register plugins, and so replace _REGISTERED
    found = _REGISTERED.get(t)
    if found is None:
        for base in t.__mro__[1:]:
            entry = _REGISTERED.get(base)
            if entry is not None and (<ShardedEntry> entry).subclasses:
                found = entry
                break
    if found is None:
        found = _PLAIN
    elif (<ShardedEntry> found).prepare is not None or (<ShardedEntry> found).canaries is not None:
        # A fast path on undocumented layouts: validated once per process against its fallback
        # (the core's one mechanism, as for readers), here on first use rather than when the
        # type resolves, since its canaries are sharded arrays over several devices.
        found = _validation.chosen_entry(found)
    _DECIDED[t] = found
    return found


def shards(x, stream=None):
    """The addressable shards of a sharded array: one zero-copy view per device.

    A jax array under any sharding, a torch ``DTensor``, or a type a plugin declares
    (``registry.add_sharded_type``) yields one :class:`Shard` per shard held by this process
    (replicated blocks once per copy, told apart by ``replica``).  Anything else that
    :func:`interop_core.view` accepts is one shard covering the whole array.

    Parameters
    ----------
    x : object
        A sharded array, or any single-device array.
    stream : None, int, stream object, or dict, optional
        The consumer stream each shard's view is ordered on (the stream contract), or a dict
        ``{CUDA device id: stream}`` giving each device's own.  ``None``: no synchronisation.

    Returns
    -------
    Shards
        A sequence of :class:`Shard` with the global ``shape`` and ``dtype``.

    Raises
    ------
    TypeError
        If ``x`` is of a type no plugin shards and that cannot be viewed either.
    ValueError
        If a plugin's shards do not tile the global shape, or a torch ``DTensor`` has
        ``Partial()`` placements.
    """
    cdef type t = type(x)
    found = _DECIDED.get(t)
    if found is None:
        found = _decide(t)
    if found is not _PLAIN:
        result = (<ShardedEntry> found).shards(x, stream)
        if type(result) is not Shards:
            raise TypeError(
                f"the shards callable registered by plugin {(<ShardedEntry> found).plugin!r} "
                f"for {t.__qualname__} returned {type(result).__name__}, not Shards (build it "
                "with interop_core.Shards.from_pieces)")
        return result
    try:
        v = _view_ordered(x, stream)
    except TypeError as exc:
        raise TypeError(
            f"interop_core.shards(): no plugin declares how {t.__module__}.{t.__qualname__} "
            "yields shards (registry.add_sharded_type), and it cannot be viewed as one "
            f"single-device array either: {exc}") from exc
    cdef Shards result_one = Shards.__new__(Shards)
    shape = v.shape
    result_one._items = (_shard_new(v, _full_index(shape), True, shape, 0),)
    result_one.shape = shape
    result_one._dtype = v.rec.dtype
    result_one.complete = True
    result_one.source = x
    return result_one
