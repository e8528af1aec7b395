"""``to()``: hand any tensor-like object to another framework without a copy."""

from __future__ import annotations

import warnings
from typing import Any

from .. import plugins
from ..registry._registry import view
from ..shards._shards import Shards

__all__ = ["to"]

# (source type, target name) -> the ReadOnlyHandoffWarning message: built once, since a handoff
# of a read-only source (every jax array) warns on every call.
_READ_ONLY_MESSAGES: dict[tuple[type, str], str] = {}


def to(obj: Any, target: Any, stream: Any = None, *, device: Any = None,
       copy: bool | None = None, **options: Any) -> Any:
    """The ``target`` framework's object over the same memory as ``obj``.

    Parameters
    ----------
    obj : object
        A view or anything :func:`interop_core.view` accepts, or a :class:`Shards` collection
        (:func:`interop_core.shards`), which the target's plugin assembles: a jax global array
        (``to(shards, "jax", sharding=...)``), per-device torch tensors or a ``DTensor``
        (``to(shards, "torch", device_mesh=..., placements=...)``), else one object per shard.
    target : str or type
        An exporter name a plugin registered (``"numpy"``, ``"torch"``, ...), or a type one of
        them produces (``numpy.ndarray``, ``torch.Tensor``, ...).
    stream : None, int or stream object, optional
        The consumer stream; ``None`` or ``-1`` for no synchronisation.  For shards also a
        dict ``{CUDA device id: stream}``.
    device : str, tuple or device object, optional
        Where the result must live, as the array API's ``from_dlpack(x, device=)``:
        ``"cpu"``, ``"cuda:1"``, a DLPack ``(device_type, device_id)`` pair, or a framework's
        device object whose ``str()`` is such a name (``torch.device``).  None: ``obj``'s
        device.  Another device means a copy (made on ``stream``; see the "Copies" page).
        Not for shards, which stay on their devices.
    copy : bool, optional
        As ``from_dlpack(x, copy=)``: True always copies, False never does (``BufferError``
        when ``device`` needs a copy), None copies only when needed.  Not for shards.
    **options
        Only for shards: passed to the target's assembler (``sharding=`` for jax,
        ``device_mesh=`` and ``placements=`` for torch).

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive, unless a copy
        was asked for or needed.

    Raises
    ------
    TypeError
        If options are given for something other than shards, or the assembler rejects them.
    ValueError
        If no plugin exports to ``target``, or (shards) the options do not match the shards.
    BufferError
        With ``copy=False`` when ``device`` is not ``obj``'s.

    Warns
    -----
    ReadOnlyHandoffWarning
        When ``obj`` is read-only and the target cannot mark its objects read-only (torch,
        cupy, numba): the result is still zero-copy, but nothing stops writes through it.
    """
    if type(obj) is Shards:
        if device is not None or copy is not None:
            raise TypeError("to(shards, ...) takes no device= or copy=: every shard stays on "
                            "its own device, zero-copy (copy a shard's view to move it)")
        from ..shards._assemble import assemble

        return assemble(obj, target, stream, options)
    if options:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(options)}: options such "
                        "as sharding= apply only to shards (interop_core.shards())")
    found = plugins.export_table.get(target)
    if found is None:
        found = plugins.exporter_for(target)   # first use: discovery, lazy type resolution
    exporter, preserves_readonly, name = found
    v = view(obj, stream)
    if device is not None or copy is not None:
        from ..copies._copy import place

        v = place(v, device, copy, stream)
    if v.readonly and not preserves_readonly:
        message = _READ_ONLY_MESSAGES.get((type(obj), name))
        if message is None:
            message = _READ_ONLY_MESSAGES[type(obj), name] = (
                f"to({type(obj).__name__}, {name!r}): the source is read-only but {name} "
                "objects cannot be; the result shares its memory, so do not write through it")
        warnings.warn(message, plugins.ReadOnlyHandoffWarning, stacklevel=2)
    return exporter(v, stream)
