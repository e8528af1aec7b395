"""``to()``: hand any tensor-like object to another framework without a copy."""

from __future__ import annotations

import warnings
from typing import Any

from .. import plugins
from ..registry._registry import view

__all__ = ["to"]

# (source type, target name) -> the ReadOnlyHandoffWarning message: built once, since a handoff
# of a read-only source (every jax array) warns on every call.
_READ_ONLY_MESSAGES: dict[tuple[type, str], str] = {}


def to(obj: Any, target: Any, stream: Any = None) -> Any:
    """The ``target`` framework's object over the same memory as ``obj``.

    Parameters
    ----------
    obj : object
        A view or anything :func:`interop_core.view` accepts.
    target : str or type
        An exporter name a plugin registered (``"numpy"``, ``"torch"``, ...), or a type one of
        them produces (``numpy.ndarray``, ``torch.Tensor``, ...).
    stream : None, int or stream object, optional
        The consumer stream; ``None`` or ``-1`` for no synchronisation.

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive.

    Raises
    ------
    ValueError
        If no plugin exports to ``target``.

    Warns
    -----
    ReadOnlyHandoffWarning
        When ``obj`` is read-only and the target cannot mark its objects read-only (torch,
        cupy, numba): the result is still zero-copy, but nothing stops writes through it.
    """
    found = plugins.export_table.get(target)
    if found is None:
        found = plugins.exporter_for(target)   # first use: discovery, lazy type resolution
    exporter, preserves_readonly, name = found
    v = view(obj, stream)
    if v.readonly and not preserves_readonly:
        message = _READ_ONLY_MESSAGES.get((type(obj), name))
        if message is None:
            message = _READ_ONLY_MESSAGES[type(obj), name] = (
                f"to({type(obj).__name__}, {name!r}): the source is read-only but {name} "
                "objects cannot be; the result shares its memory, so do not write through it")
        warnings.warn(message, plugins.ReadOnlyHandoffWarning, stacklevel=2)
    return exporter(v, stream)
