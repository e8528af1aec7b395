"""``to()``: hand any tensor-like object to another framework without a copy."""

from __future__ import annotations

import warnings
from typing import Any

from .. import plugins
from ..registry._registry import view
from ..shards._shards import Shards

__all__ = ["to"]


def to(obj: Any, target: Any, stream: Any = None, **options: Any) -> Any:
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
    **options
        Only for shards: passed to the target's assembler (``sharding=`` for jax,
        ``device_mesh=`` and ``placements=`` for torch).

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive.

    Raises
    ------
    TypeError
        If options are given for something other than shards, or the assembler rejects them.
    ValueError
        If no plugin exports to ``target``, or (shards) the options do not match the shards.

    Warns
    -----
    ReadOnlyHandoffWarning
        When ``obj`` is read-only and the target cannot mark its objects read-only (torch,
        cupy, numba): the result is still zero-copy, but nothing stops writes through it.
    """
    if type(obj) is Shards:
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
    if v.readonly and not preserves_readonly:
        warnings.warn(
            f"to({type(obj).__name__}, {name!r}): the source is read-only but {name} objects "
            "cannot be; the result shares its memory, so do not write through it",
            plugins.ReadOnlyHandoffWarning, stacklevel=2)
    return exporter(v, stream)
