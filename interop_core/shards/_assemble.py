"""``to(shards, target)``: the target framework's object(s) over a :class:`Shards`' memory."""

from __future__ import annotations

import warnings
from typing import Any

from .. import plugins
from ._shards import Shards, stream_for_device

__all__ = ["assemble"]


def assemble(shards: Shards, target: Any, stream: Any, options: dict) -> Any:
    """What ``interop_core.to(shards, target, stream, **options)`` returns.

    The plugin that registered an assembler for ``target`` (``registry.add_shard_assembler``)
    builds the framework's global object (jax) or its per-device ones (torch); for any other
    target each shard is handed over on its own, in order, as a tuple.

    Raises
    ------
    TypeError
        If options are given for a target that has no assembler, or the assembler rejects
        them.
    ValueError
        If no plugin exports to ``target``, or the shards do not match the options.
    """
    _, preserves_readonly, name, _ = plugins.exporter_for(target)
    assembler = plugins.shard_assembler_for(name)
    if assembler is not None:
        return assembler(shards, stream, **options)
    if options:
        raise TypeError(
            f"to(shards, {name!r}) got options {sorted(options)}, but no plugin assembles shards "
            f"for {name!r}: each shard is handed over on its own, without options")
    if not preserves_readonly and any(s.view.readonly for s in shards):
        warnings.warn(
            f"to(shards, {name!r}): the shards are read-only but {name} objects cannot be; the "
            "results share their memory, so do not write through them",
            plugins.ReadOnlyHandoffWarning, stacklevel=3)
    from ..handoff._handoff import export_checked

    # Each through the target's import limits (a copy where its framework cannot take a
    # shard's layout as it is), as to(shard.view, name) would, warned about once above.
    return tuple(export_checked(s.view, name, stream_for_device(stream, s.device))
                 for s in shards)
