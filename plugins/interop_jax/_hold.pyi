"""Holds: jax's external reference on a buffer, for as long as a view or export of it lives."""

from typing import Any, final

from typing_extensions import disjoint_base

__all__ = ["BufferHold", "PendingHold"]

@disjoint_base
class BufferHold:
    """jax's external reference on one jax array's buffer, shared by the views and exports of
    it alive at once (the keep-alive every read of the jax reader hands the core)."""
    @property
    def array(self) -> Any:
        """The jax array whose buffer is held."""

@final
class PendingHold:
    """What a view of a jax array made without a hold needs to take one at its first use (the
    state of the core's ``DeferredKeepalive``)."""
