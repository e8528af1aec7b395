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


def to(obj: Any, target: Any, stream: Any = None, *, device: Any = None,
       copy: bool | None = None) -> Any:
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
    device : str, tuple or device object, optional
        Where the result must live, as the array API's ``from_dlpack(x, device=)``:
        ``"cpu"``, ``"cuda:1"``, a DLPack ``(device_type, device_id)`` pair, or a framework's
        device object whose ``str()`` is such a name (``torch.device``).  None: ``obj``'s
        device.  Another device means a copy (made on ``stream``; see the "Copies" page).
    copy : bool, optional
        As ``from_dlpack(x, copy=)``: True always copies, False never does (``BufferError``
        when ``device`` needs a copy), None copies only when needed.

    Returns
    -------
    object
        Shares memory with ``obj`` (same pointer) and keeps its owner alive, unless a copy
        was asked for or needed.

    Raises
    ------
    ValueError
        If no plugin exports to ``target``.
    BufferError
        With ``copy=False`` when ``device`` is not ``obj``'s.

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
