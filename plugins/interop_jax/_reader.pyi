"""The jax plugin's exporter (``to(view, "jax")``) and, by their old names, the reader's public
functions (see ``_read``, ``_validation``, ``_shards_read``, ``_hold``)."""

from typing import Any

from interop_core import ImportLimits, StridedMemoryView

from ._hold import BufferHold as BufferHold
from ._read import producer_stream as producer_stream
from ._read import read_with_dlpack as read_with_dlpack
from ._read import reader_capsule as reader_capsule
from ._shards_read import prepare_shards as prepare_shards
from ._shards_read import read_shards as read_shards
from ._shards_read import shard_canaries as shard_canaries
from ._validation import canaries as canaries
from ._validation import prepare as prepare

__all__ = ["reader_capsule", "read_with_dlpack", "prepare", "canaries", "producer_stream",
           "to_jax", "export_status", "read_shards", "prepare_shards", "shard_canaries",
           "BufferHold"]

def to_jax(view: StridedMemoryView, stream: Any = None, device: Any = None) -> Any:
    """A ``jax.Array`` over the memory of ``view`` (same pointer), keeping ``view`` alive."""

def x64_refusal(view: StridedMemoryView) -> str | None:
    """Why jax cannot take ``view`` as it is configured (a 64-bit type without x64), or None."""

def resolve_device(device: Any) -> tuple[int, int, Any]:
    """Where ``to(x, "jax", device=device)`` puts the result: ``(type, id, jax device)``."""

def source_device(view: StridedMemoryView) -> Any:
    """The jax CPU device of the jax array ``view`` is of, or None: where a copy lands."""

def import_limits() -> ImportLimits:
    """The :class:`interop_core.ImportLimits` of ``to(x, "jax")``."""

def export_status() -> dict[str, tuple[bool, str]]:
    """The once-per-platform checks of ``to(x, "jax")``'s direct import made so far."""
