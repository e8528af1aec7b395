# The jax reader's validation, run once per process by the core (interop_core/registry/
# _validation.py) before the reader's first use: canary arrays, read by the reader and by its
# fallback (jax's own __dlpack__) and compared field by field, and prepare(), which checks what
# that comparison leaves out.

from libc.stdint cimport uintptr_t
from libc.string cimport memset
from cpython.ref cimport Py_XDECREF

from interop_core.abi cimport interop_core_tensor_info

from interop_jax._handles cimport _from_capsule, _setup, _single_sharding, _to_capsule
from interop_jax._read cimport _read_deferred, _read_held

__all__ = ["canaries", "prepare"]

cdef object _MISSING = object()     # module-owned sentinel for getattr


def canaries():
    """jax arrays made like the ones users read, on jax's default device, for validation.

    Returns
    -------
    list
        Contiguous, sliced, transposed, 0-d, zero-size and many-dimensional arrays of several
        dtypes (jax materialises every slice as a new dense array).
    """
    import jax.numpy as jnp

    base = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    return [base, base[1], base[:, 1:, ::2], base.T, jnp.zeros((), jnp.int32),
            jnp.zeros((0, 3), jnp.float32), jnp.arange(5, dtype=jnp.int8),
            jnp.ones((3, 2), jnp.bool_), jnp.ones((2, 2), jnp.complex64),
            jnp.ones((4, 3), jnp.float16), jnp.ones((2, 5), jnp.uint8),
            jnp.ones((2, 3, 1, 2, 1, 2, 2, 3), jnp.int16)]


cdef tuple _info_key(interop_core_tensor_info* info):
    """The fields of a read that describe the memory."""
    shape = tuple(info.shape[i] for i in range(info.ndim))
    if info.strides != NULL:
        strides = tuple(info.strides[i] for i in range(info.ndim))
    else:                   # NULL: C-contiguous (the element strides spelled out)
        step, strides = 1, []
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= max(extent, 1)
        strides = tuple(strides)
    return (<uintptr_t> info.data, info.dtype_code, info.dtype_bits, info.dtype_lanes,
            info.device_type, info.device_id, shape, strides, info.strides_in_bytes)


def prepare(samples=None):
    """Check what the core's comparison with the fallback leaves out (once per process).

    Looks jax's handles up again, checks that a single-device array's ``_sharding`` is jax's
    ``SingleDeviceSharding`` (the reader's fast case), and that a read made while a hold of the
    same array lives (a shared read, which the core's comparison never makes: its reads are
    first reads) says what the first read said and shares its hold.  The core then compares the
    reads with :func:`read_with_dlpack` on :func:`canaries`.

    Parameters
    ----------
    samples : iterable, optional
        jax arrays to check (default: :func:`canaries`).

    Returns
    -------
    dict or str
        Details when the reader may be used; otherwise why not.
    """
    cdef interop_core_tensor_info first, again, deferred
    import jax.numpy as jnp

    probe = jnp.zeros(3, jnp.float32)
    _setup(type(probe))
    if type(probe._sharding) is not _single_sharding:
        return f"_sharding is a {type(probe._sharding).__name__}, not SingleDeviceSharding"
    # The reader compares `_memory_kind` (what the sharding was made with) with the last one
    # met, and resolves `memory_kind` (the public one) only for a new one.
    kind = getattr(probe._sharding, "_memory_kind", _MISSING)
    if kind is _MISSING:
        return "SingleDeviceSharding has no _memory_kind"
    if kind is not None and kind != probe._sharding.memory_kind:
        return f"_memory_kind {kind!r} != memory_kind {probe._sharding.memory_kind!r}"
    shared = 0
    for x in (canaries() if samples is None else samples):
        memset(&first, 0, sizeof(first))
        memset(&again, 0, sizeof(again))
        memset(&deferred, 0, sizeof(deferred))
        try:
            # The core compares the reader's deferred reads (what view() makes) with the
            # fallback; reads that hold at once (to(), launch_args) must say the same.
            _read_deferred(x, &deferred)
            d = _info_key(&deferred)
            _read_held(x, &first)
            a = _info_key(&first)
            if a[6] != tuple(x.shape):
                return f"shape {a[6]} != {x.shape}"
            if d != a:
                return f"a read holding at the memory's first use {d} != a holding read {a}"
            _read_held(x, &again)          # while the first read's hold lives
            b = _info_key(&again)
            if b != a:
                return f"a read sharing a live hold {b} != the first read {a}"
            if first.keepalive == again.keepalive:
                shared += 1
            elif x.size:
                return "a second read of an array whose hold lives took a new hold"
        finally:
            Py_XDECREF(first.keepalive)
            Py_XDECREF(again.keepalive)
            Py_XDECREF(deferred.keepalive)
    return {"holds": ("jaxlib buffer_to_dlpack_managed_tensor" if _to_capsule is not None
                      else "jax __dlpack__ (jaxlib has no buffer_to_dlpack_managed_tensor)"),
            "shared_reads_checked": shared, "direct_import": _from_capsule is not None}
