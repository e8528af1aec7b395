"""Sharded arrays: one zero-copy view per addressable shard, and assembling them back.

``interop_core.shards(x)`` (:func:`._shards.shards`) returns a :class:`Shards` sequence of
:class:`Shard` records; plugins declare how their sharded types yield shards with
``registry.add_sharded_type`` (building them with :meth:`Shards.from_pieces`, or with a
:class:`ShardLayout` checked once per layout) and how their framework assembles shards with
``registry.add_shard_assembler``.  Distribution itself is the frameworks' (jax shardings and
``jax.distributed``, torch.distributed and ``DTensor``): nothing here moves data.
"""

from collections.abc import Sequence

from ._shards import Shard, ShardLayout, Shards, shards, stream_for_device

__all__ = ["Shard", "ShardLayout", "Shards", "shards", "stream_for_device"]

Sequence.register(Shards)
