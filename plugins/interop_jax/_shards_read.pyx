# Sharded arrays: shards() without jax's Shard objects (the fast path behind interop_core.shards
# for jax arrays; _sharded.py holds the public path it falls back to, and the assembler).
#
# jax's public answer, array.addressable_shards, builds a Python Shard per device and computes
# each one's index and replica id in Python (cached on the array, but recomputed for every new
# array): per shard it costs about as much again as viewing the shard.  What it computes depends
# only on the sharding and the global shape, so it is asked once per (sharding, shape) -- of
# jax's public answer -- and kept as a plan: the core's ShardLayout (indices, replica ids,
# tiling checked once) and, per slot, the device jax puts there.  Per call the array's own list
# of per-device arrays (`_arrays`, in the order of the sharding's addressable devices: the order
# jax's own __array__ relies on) is confirmed slot by slot against the plan (device, shape),
# then each per-device array is described as view() describes a single-device array (the
# reader's _read_deferred: its own accessors, the hold deferred to the memory's first use, or a
# live hold of it shared), and the views are made in one loop here (the core's view_from_info)
# rather than through one view() call each.  Each shard view holds its per-device buffer from
# its first use on; nothing here keeps a hold beyond the views.  A slot that does not
# match the plan (another device, an unexpected shape) sends the call to the public path.  All
# of it is jax internals: the core validates this path once per process against the public one
# (prepare_shards, shard_canaries), and installs the public path instead if anything differs.

from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from cpython.list cimport PyList_GET_ITEM
from libc.stdint cimport int32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from interop_core.abi cimport interop_core_tensor_info

from interop_jax._handles cimport _api, _pending_error, _ready, _setup, _single_sharding
from interop_jax._devices cimport _resolve_device
from interop_jax._read cimport _read_deferred

__all__ = ["read_shards", "shard_canaries", "prepare_shards"]

cdef enum:
    MAX_PLANS = 64          # (sharding, shape) plans kept; all are forgotten when full


cdef class _ShardPlan:
    """What jax says of one (sharding, global shape), and the last objects seen per slot."""
    cdef Py_ssize_t count           # addressable shards
    cdef int ndim
    cdef object make_shards         # the core ShardLayout's bound `shards` method (owned here;
                                    # it owns the layout)
    cdef list devices               # per slot, the jax Device jax puts there (owned here)
    cdef list shard_shapes          # per slot, the shape tuple of that device's array (owned)
    cdef list kinds                 # per slot (owned here), the _memory_kind of the sharding
                                    # jax gave that device's array when planned (a
                                    # SingleDeviceSharding), else _NO_KIND
    cdef list seen_sharding         # per slot, the last per-device sharding confirmed there, or
                                    # None (owned here: compared by identity)
    cdef list seen_aval             # per slot, the last per-device aval confirmed there, or
                                    # None (owned here)
    cdef int32_t* device_types      # per slot, the DLPack device type: one malloc'd block owned
                                    # here holds this and the ids
    cdef int32_t* device_ids        # per slot, the DLPack device id (in that block)

    def __dealloc__(self):
        free(self.device_types)      # the ids share this one allocation


# (sharding, shape) -> _ShardPlan, or None where jax's per-device arrays are not their blocks
# (owned here, with the shardings in the keys; bounded by MAX_PLANS).
cdef dict _plans = {}
# The last plan used and its key, so that arrays of one jitted function cost one identity check
# (strong references owned here, replaced on a miss).
cdef object _last_plan_sharding = None
cdef object _last_plan_shape = None
cdef _ShardPlan _last_plan = None
cdef object _layout_type = None     # interop_core.ShardLayout, looked up once (a reference)
cdef object _public_shards = None   # interop_jax._sharded.jax_shards, the public path (a reference)


cdef object _NO_KIND = object()     # module-owned sentinel: "no memory kind planned here"


_DELETED_SHARDS = (
    "cannot read the shards of a deleted jax array: its buffers were freed by array.delete() "
    "or donated to a jitted computation (donate_argnums)")


cdef _ShardPlan _make_plan(object array, object sharding, tuple shape):
    """The plan of (sharding, shape), from jax's public answer for `array`."""
    global _layout_type
    cdef _ShardPlan plan = _ShardPlan.__new__(_ShardPlan)
    cdef Py_ssize_t k, n, d, ndim = len(shape)
    import jax
    if _layout_type is None:
        from interop_core import ShardLayout
        _layout_type = ShardLayout
    from interop_jax._sharded import current_shards
    local = current_shards(array)       # jax's list, asked again where its cache is stale
    n = len(local)
    complete = jax.process_count() == 1 or sharding.is_fully_addressable
    layout = _layout_type(shape, [s.index for s in local], [s.replica_id for s in local],
                          complete=complete)
    plan.count = n
    plan.ndim = ndim
    plan.make_shards = layout.shards
    plan.devices = [s.device for s in local]
    plan.kinds = [s.data._sharding._memory_kind if type(s.data._sharding) is _single_sharding
                  else _NO_KIND for s in local]
    plan.shard_shapes = [tuple(s.data.aval.shape) for s in local]
    plan.seen_sharding = [None] * n
    plan.seen_aval = [None] * n
    cdef size_t slots = n if n else 1
    plan.device_types = <int32_t*> malloc(slots * 2 * sizeof(int32_t))
    if plan.device_types == NULL:
        raise MemoryError()
    plan.device_ids = plan.device_types + slots
    memory_kind = sharding.memory_kind
    for k in range(n):
        dev = <tuple> _resolve_device(plan.devices[k], memory_kind)
        plan.device_types[k] = dev[0]
        plan.device_ids[k] = dev[1]
        index = layout.indices[k]
        block = tuple([index[d].stop - index[d].start for d in range(ndim)])
        if plan.shard_shapes[k] != block:
            return None          # jax's per-device array is not its block: public path only
    return plan


cdef _ShardPlan _plan_for(object array, object sharding, tuple shape):
    global _last_plan, _last_plan_sharding, _last_plan_shape
    if sharding is _last_plan_sharding and (shape is _last_plan_shape
                                            or shape == _last_plan_shape):
        return _last_plan
    key = (sharding, shape)
    try:
        found = _plans[key]
    except KeyError:
        found = _make_plan(array, sharding, shape)
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        _plans[key] = found
    except TypeError:            # an unhashable sharding: the public path
        return None
    if found is not None:
        _last_plan, _last_plan_sharding, _last_plan_shape = found, sharding, shape
    return <_ShardPlan> found


cdef bint _slot_matches(_ShardPlan plan, Py_ssize_t k, object sharding,
                        object aval) except -1:
    """Whether a per-device array whose `_sharding` and `aval` are these sits where the plan
    says slot `k` is (caches what it saw)."""
    cdef bint same_kind
    if sharding is not plan.seen_sharding[k]:
        # Every new array has new per-device shardings: the device by identity (jax's devices
        # are unique) and the memory kind as planned are enough; anything else is resolved as
        # the reader resolves it and compared with the plan.
        if type(sharding) is _single_sharding:
            device = sharding._device
            kind = sharding._memory_kind
            same_kind = kind is plan.kinds[k] or kind == plan.kinds[k]
        else:
            # An array over one device under another sharding type (a one-device mesh): its
            # device as jax's own _get_device finds it.
            devices = sharding._internal_device_list
            if len(devices) != 1:
                return False
            device = devices[0]
            same_kind = False
        if device is not plan.devices[k]:
            return False
        if not same_kind:
            dev = <tuple> _resolve_device(device, sharding.memory_kind)
            if dev[0] != plan.device_types[k] or dev[1] != plan.device_ids[k]:
                return False
        plan.seen_sharding[k] = sharding
    if aval is not plan.seen_aval[k]:
        if aval.shape != plan.shard_shapes[k]:
            return False
        plan.seen_aval[k] = aval
    return True


cdef object _slot_view(object a):
    """The view of a per-device array `a`, read as view() reads a single-device array: its hold
    deferred to the memory's first use, or a live hold of it shared."""
    cdef interop_core_tensor_info info
    cdef PyObject* made
    memset(&info, 0, sizeof(info))
    _read_deferred(a, &info)        # the keep-alive, taken over by view_from_info
    made = _api.view_from_info(<PyObject*> a, &info)
    if made == NULL:
        _pending_error()
    v = <object> made
    Py_XDECREF(made)             # <object> took its own reference
    return v


cdef object _read_shards(object array, object stream):
    cdef Py_ssize_t k, n
    cdef _ShardPlan plan
    arrays = array._arrays
    if arrays is None:
        raise BufferError(_DELETED_SHARDS)
    aval = array.aval
    plan = _plan_for(array, array._sharding, <tuple> aval.shape)
    if plan is None or type(arrays) is not list or len(<list> arrays) != plan.count:
        return None
    n = plan.count
    # Every slot is confirmed before any hold is taken: a mismatch means the public path.
    for k in range(n):
        a = <object> PyList_GET_ITEM(arrays, k)
        if not _slot_matches(plan, k, a._sharding, a.aval):
            return None
    if n == 0:
        return plan.make_shards(arrays, stream, array, dtype=aval.dtype)
    if stream is not None:
        # Ordered reads go through view() per piece, as the public path does (the reader
        # orders each on its device's stream, or jaxlib waits for jax's CPU work).
        return plan.make_shards(arrays, stream, array)
    views = [_slot_view(<object> PyList_GET_ITEM(arrays, k)) for k in range(n)]
    return plan.make_shards(views, None, array)


cdef bint _is_partly_deleted(object array):
    """Whether any buffer of `array` was deleted or donated (jaxlib's `is_deleted()` asks only
    the first one; a shard's `data` may be deleted alone)."""
    try:
        if array.is_deleted():
            return True
        arrays = array._arrays
        return arrays is None or any([a.is_deleted() for a in arrays])
    except Exception:
        return False            # not a jax array as we know it: its own error stands


def read_shards(array, stream=None):
    """The addressable shards of a jax array, without jax's ``Shard`` objects (the fast path).

    ``registry.add_sharded_type`` callable.  Reads jax internals (the array's per-device
    arrays, confirmed against a plan of jax's public answer), validated once per process
    against :func:`jax_shards <interop_jax._sharded.jax_shards>` (the public path), which also
    serves any array whose per-device arrays do not sit where the plan of its sharding says.
    Each shard's view holds its per-device buffer as a view of a single-device array does:
    from the first use of its memory on.

    Parameters
    ----------
    array : jax.Array
    stream : None, int, stream object or dict, optional
        The consumer stream(s), as :func:`interop_core.shards` takes them.

    Returns
    -------
    interop_core.Shards

    Raises
    ------
    BufferError
        If the array, or any of its per-device buffers, was deleted or donated.
    """
    global _public_shards
    try:
        if not _ready:
            _setup(type(array))
        found = _read_shards(array, stream)
    except Exception as exc:
        if _is_partly_deleted(array):
            raise BufferError(_DELETED_SHARDS) from None
        raise
    if found is None:
        if _public_shards is None:
            from interop_jax._sharded import jax_shards
            _public_shards = jax_shards
        found = _public_shards(array, stream)
    return found


def shard_canaries():
    """Sharded jax arrays over this process's devices of jax's default backend (validation).

    Returns
    -------
    list
        Split by rows, by columns and both ways, fully and partially replicated, on one device,
        of several dtypes and ranks, empty, and a jitted computation's output (whose per-device
        arrays jax arranges without checks).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    devices = jax.local_devices()
    n = len(devices)
    line = Mesh(np.array(devices), ("x",))
    rows = NamedSharding(line, PartitionSpec("x"))
    # 2n x 2n: every mesh below divides both dimensions.
    base = np.arange(4 * n * n, dtype=np.float32).reshape(2 * n, 2 * n)
    out = [jax.device_put(base, rows),
           jax.device_put(np.ascontiguousarray(base.T), NamedSharding(line, PartitionSpec(None, "x"))),
           jax.device_put(base, NamedSharding(line, PartitionSpec())),
           jax.device_put(base[:2], SingleDeviceSharding(devices[n - 1])),
           jax.device_put(base.astype(np.int8), rows),
           jax.device_put(base > 7, rows),
           jax.device_put(base.astype(np.float16), rows),
           jax.device_put(base.astype(np.complex64), rows),
           jax.device_put(base.reshape(-1), rows),
           jax.device_put(np.zeros((0, 2 * n), np.float32), rows),
           jax.device_put(base.reshape(2, n, 2 * n),
                          NamedSharding(line, PartitionSpec(None, "x"))),
           jax.jit(jax.numpy.negative)(jax.device_put(base, rows))]
    if n >= 4 and n % 2 == 0:
        grid = Mesh(np.array(devices).reshape(2, n // 2), ("x", "y"))
        out += [jax.device_put(base, NamedSharding(grid, PartitionSpec("x", "y"))),
                jax.device_put(base, NamedSharding(grid, PartitionSpec("x"))),
                jax.device_put(base, NamedSharding(grid, PartitionSpec(None, "y")))]
    return out


def prepare_shards():
    """Check what the comparison with the public path leaves out (once per process).

    The fast path holds and describes per-device arrays as the reader does, so it is used only
    where the reader passed its own validation; it also needs each array's per-device arrays
    (``_arrays``) to be jax's own shards' data, in order, each on a ``SingleDeviceSharding``.
    The core then splits :func:`shard_canaries` both ways and compares.

    Returns
    -------
    dict or str
        Details when the fast path may be used; otherwise why not.
    """
    import jax

    from interop_core import plugins

    probe = jax.device_put(jax.numpy.zeros(3, jax.numpy.float32))
    _setup(type(probe))
    entry = plugins.reader_for(type(probe))
    from interop_jax._read import read_with_dlpack
    if entry is None or entry.reader is read_with_dlpack:
        return ("the jax reader did not pass its validation in this process (see doctor), and "
                "the sharded path holds and reads per-device arrays as it does")
    checked = 0
    for x in shard_canaries():
        arrays = x._arrays
        local = x.addressable_shards
        if type(arrays) is not list or len(arrays) != len(local):
            return f"_arrays is {type(arrays).__name__}, not a list of the {len(local)} shards"
        for a, shard in zip(arrays, local):
            if a is not shard.data:
                return "_arrays does not hold jax's own shards' data, in their order"
            if (type(a._sharding) is _single_sharding and a._sharding._device is not shard.device
                    or tuple(a._sharding._internal_device_list) != (shard.device,)):
                return f"a per-device array's _sharding is {a._sharding!r}, not {shard.device}'s"
        checked += 1
    return {"plans": "one per (sharding, global shape), from addressable_shards",
            "arrays_checked": checked, "devices": len(jax.local_devices()),
            "holds": "one per shard view: its per-device buffer's, from its first use, as view() takes them"}
