"""Stub for the compiled cupy readers (registered through interop_core.h, ABI v2)."""

from typing import Any

__all__ = ["fields_reader_capsule", "attributes_reader_capsule", "equivalence_check_capsule",
           "producer_stream", "prepare", "canaries"]

def fields_reader_capsule() -> Any:
    """The fields reader (cupy's struct fields at located offsets), as a capsule (ABI v2)."""

def attributes_reader_capsule() -> Any:
    """The attributes reader (cupy's documented attributes, read from C), as a capsule."""

def equivalence_check_capsule() -> Any:
    """Whether cupy's own interface gives the readers' view (not for arrays of no element)."""

def producer_stream(obj: Any) -> int:
    """cupy's current stream on the device of ``obj``, as a CUstream handle (0: legacy)."""

def canaries() -> list[Any]:
    """cupy arrays whose pointers, shapes, strides, dtypes and device ids all differ."""

def prepare() -> dict[str, str] | str:
    """Locate cupy's fields and check its stream function; details, or why not."""

def _stream_reader() -> str: ...
def _locate_fields(arrays: list[Any]) -> str | None: ...
