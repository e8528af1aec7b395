"""Sharded jax arrays: ``shards()`` through jax's own shards, ``to(shards, "jax")`` through
``jax.make_array_from_single_device_arrays``.

Reading, the public path: every shard of ``array.addressable_shards`` (jax's own list: its
``data``, ``index`` and ``replica_id``) becomes a :class:`interop_core.Shard`, its data viewed by
the plugin's reader like any single-device array.  ``shards()`` takes the compiled path
(``_shards_read.read_shards``), which asks this list once per sharding and global shape; this
one is its fallback, validated against it once per process.  Any sharding works (``SingleDeviceSharding``,
``NamedSharding``, ``PositionalSharding`` and ``GSPMDSharding`` where the installed jax has
them, fully or partially replicated): jax computes the indices and replica ids, we only read
them.  Under ``jax.distributed`` a process sees only the shards on its own devices
(``Shards.complete`` is then False).

Assembling: for each device of the target sharding that this process holds, the shard whose
index jax assigns to it is handed to jax zero-copy (``jax.dlpack.from_dlpack`` for device
memory, which lands on the device the memory is on; ``jax.device_put`` of a numpy array over
host memory for a jax CPU device, the one way to place host memory on any CPU device without
a copy), then ``jax.make_array_from_single_device_arrays`` builds the global array.

Loading this module imports neither jax nor numpy.
"""

from __future__ import annotations

import warnings

import interop_core
from interop_core import Shards

__all__ = ["assemble_jax", "jax_shards", "current_shards"]

_KDL_CPU = 1
_KDL_CUDA = 2
_KDL_ROCM = 10


def jax_shards(array, stream=None):
    """The addressable shards of a jax array (``registry.add_sharded_type`` callable).

    Parameters
    ----------
    array : jax.Array
    stream : None, int, stream object or dict, optional
        Passed on to :meth:`interop_core.Shards.from_pieces`.

    Returns
    -------
    interop_core.Shards

    Raises
    ------
    BufferError
        If the array was deleted or donated.
    """
    # jax's Shard objects carry data, index and replica_id: from_pieces reads them in C.
    try:
        local = current_shards(array)
    except RuntimeError:
        if array.is_deleted():
            raise BufferError(_DELETED) from None
        raise
    if _single_process is None:
        _count_processes()
    # array.is_fully_addressable costs a fifth of a shard's view; in a single process every
    # device is addressable.  (array.aval.shape is array.shape without a Python property.)
    return Shards.from_pieces(array.aval.shape, local, stream=stream,
                              dtype=None if local else array.dtype,
                              complete=_single_process or array.is_fully_addressable,
                              source=array)


def current_shards(array):
    """``array.addressable_shards``, asked again where jax's cached list is stale.

    jax keeps the list on the array (``array.__dict__``) and ``_replace_with`` (behind jax's
    mutable arrays; up to jax 0.11 it also swaps in arrays of another shape) does not drop it:
    the cached shards would name the old per-device arrays and the old shape's blocks.  The
    list is current when its shards' data are the array's per-device arrays (``_arrays``).
    """
    local = array.addressable_shards
    arrays = getattr(array, "_arrays", None)
    if type(arrays) is list and (len(local) != len(arrays) or any(
            [s.data is not a for s, a in zip(local, arrays, strict=True)])):
        array.__dict__.pop("addressable_shards", None)
        local = array.addressable_shards
    return local


_DELETED = ("cannot read the shards of a deleted jax array: its buffers were freed by "
            "array.delete() or donated to a jitted computation (donate_argnums)")
_single_process: bool | None = None   # jax.process_count() == 1 (fixed once jax's backend exists)


def _count_processes() -> None:
    global _single_process
    import jax

    _single_process = jax.process_count() == 1


def _dlpack_device(device) -> tuple[int, int] | None:
    platform = device.platform
    if platform == "cpu":
        return (_KDL_CPU, 0)
    if platform in ("gpu", "cuda"):
        return (_KDL_CUDA, device.local_hardware_id)
    if platform == "rocm":
        return (_KDL_ROCM, device.local_hardware_id)
    return None


def _block_key(index, shape) -> tuple:
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def _block_text(key) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in key) + "]"


def _single_device_array(view, device):
    """A jax array on ``device`` over ``view``'s memory, without a copy where jax allows it."""
    import jax

    from . import JaxCopyWarning, export_jax

    if view.device_type == _KDL_CPU:
        host = interop_core.to(view, "numpy")
        # Said before the transfer: asking the result for its pointer would wait for it.
        if view.size and not _jax_shares(view, host.dtype):
            warnings.warn(
                f"jax copies the shard at {view.ptr:#x} onto {device} instead of sharing it "
                "(jax shares only 64-byte aligned, C-contiguous host memory, and converts "
                "64-bit types unless jax_enable_x64 is set)", JaxCopyWarning, stacklevel=5)
        return jax.device_put(host, device)
    result = export_jax(view)
    if result.devices() != {device}:
        raise ValueError(f"jax imported the shard on {view.device_type}:{view.device_id} onto "
                         f"{sorted(result.devices(), key=str)}, not {device}")
    return result


def _jax_shares(view, dtype) -> bool:
    """Whether ``jax.device_put`` takes a numpy array over ``view`` as it is (CPU devices)."""
    import jax

    return (view.ptr % 64 == 0 and view.layout.is_contiguous_c
            and jax.dtypes.canonicalize_dtype(dtype) == dtype)


def assemble_jax(shards, stream=None, *, sharding=None):
    """A jax global array over the shards' memory (``registry.add_shard_assembler`` callable).

    Parameters
    ----------
    shards : interop_core.Shards
        Per-device pieces from any framework.
    stream : optional
        Unused: jax orders each device import on its own stream through ``__dlpack__``.
    sharding : jax.sharding.Sharding, optional
        How the global array is laid out over devices; every device of it that this process
        holds must find a shard with the index jax assigns it, on that device (any host
        memory for a jax CPU device).  Defaults to the sharding of the jax array the shards
        were read from.

    Returns
    -------
    jax.Array
        Of the shards' global shape and dtype; each device's buffer is the shard's memory.

    Raises
    ------
    TypeError
        If ``sharding`` is missing (shards not read from a jax array) or not a jax Sharding.
    ValueError
        If the sharding does not match the shards: a device's block has no shard, or its
        shard lives on another device (assembling without a copy needs it in place).

    Warns
    -----
    interop_jax.JaxCopyWarning
        If jax copied a shard (unaligned host memory, 64-bit types without x64).
    """
    import jax

    if sharding is None:
        source = shards.source
        if not isinstance(source, jax.Array):
            raise TypeError(
                "to(shards, 'jax') needs sharding=: the jax Sharding of the global array (these "
                f"shards were read from {type(source).__name__}, which carries none)")
        sharding = source.sharding
    if not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError(f"sharding must be a jax.sharding.Sharding, got {type(sharding).__name__}")
    shape = shards.shape
    try:
        wanted = sharding.addressable_devices_indices_map(shape)
    except Exception as exc:
        raise ValueError(f"the sharding {sharding} cannot lay out the global shape {shape}: "
                         f"{exc}") from exc
    by_block: dict[tuple, list[int]] = {}
    for k, shard in enumerate(shards):
        by_block.setdefault(_block_key(shard.index, shape), []).append(k)
    used: set[int] = set()
    arrays = []
    for device, index in wanted.items():
        key = _block_key(index, shape)
        candidates = by_block.get(key)
        if not candidates:
            held = ", ".join(_block_text(b) for b in by_block) or "none"
            raise ValueError(
                f"the requested sharding does not match the shards given: it puts block "
                f"{_block_text(key)} of the global shape {shape} on {device}, and no shard has "
                f"that index (the shards hold {held})")
        place = _dlpack_device(device)
        matching = [k for k in candidates if shards[k].device == place]
        # A copy of the block not taken yet, else (host memory only: every jax CPU device
        # addresses it) one already taken.
        chosen = next((k for k in matching if k not in used), None)
        if chosen is None and place is not None and place[0] == _KDL_CPU and matching:
            chosen = matching[0]
        if chosen is None:
            where = ", ".join(f"{shards[k].device[0]}:{shards[k].device[1]}" for k in candidates)
            raise ValueError(
                f"the requested sharding does not match the shards given: it puts block "
                f"{_block_text(key)} on {device} (DLPack device {place}), but the shards with "
                f"that index are on [{where}]; assembling without a copy needs each block "
                "already on its device")
        used.add(chosen)
        arrays.append(_single_device_array(shards[chosen].view, device))
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)
