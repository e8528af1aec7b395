"""Stub for the compiled torch reader (registered through interop_core.h, ABI v2)."""

from typing import Any

from interop_core import ImportLimits, StridedMemoryView

__all__ = ["reader_capsule", "read_checked", "prepare", "canaries", "aoti_producer_stream",
           "to_torch", "import_limits", "export_rule_capsule", "export_rule_status",
           "equivalence_check_capsule"]

def reader_capsule() -> Any:
    """The AOTI reader, as the capsule ``registry.add_type(reader=...)`` takes (ABI v2)."""

def read_checked(obj: Any, stream: int | None) -> StridedMemoryView:
    """The fallback: torch's Python API checks, then torch's own DLPack export."""

def canaries() -> list[Any]:
    """Tensors the reader must read exactly as the fallback does (CPU, and CUDA if available)."""

def prepare() -> dict[str, Any] | str:
    """Find and check torch's AOTI functions and object layouts; details, or why not."""

def aoti_producer_stream(device_index: int) -> int | None:
    """torch's current CUDA stream on ``device_index`` through AOTI, or None if unavailable."""

def equivalence_check_capsule() -> Any:
    """Whether torch's ``__cuda_array_interface__`` gives the reader's view of a tensor (a
    capsule for ``registry.add_type(equivalence_check=...)``)."""

def to_torch(view: StridedMemoryView, stream: object = None) -> Any:
    """A ``torch.Tensor`` over the memory of ``view``, through the DLPack C exchange API."""

def import_limits() -> ImportLimits:
    """The :class:`interop_core.ImportLimits` of ``to(x, "torch")``."""

def export_rule_status() -> dict[str, Any] | None:
    """How torch's export rule tells tensors that require grad (``None`` before its first use)."""

def export_rule_capsule() -> Any:
    """torch's export rule (``registry.add_export_rule``): refuses tensors that require grad."""

def _set_keyset_detection(enabled: bool) -> bool: ...
def _set_field_reads(enabled: bool) -> bool: ...
def _path_of(t: Any) -> str: ...
def _takes_direct(t: Any) -> bool: ...
def _policy_bits(t: Any) -> int: ...
