"""Stub for the compiled dtype table (the public API is interop_core.dtypes)."""

from typing import Any

__all__ = [
    "as_dlpack_dtype",
    "triple_to_numpy",
    "triple_name",
    "triple_itemsize",
    "known_dtypes",
]

def as_dlpack_dtype(obj: Any) -> tuple[int, int, int]: ...
def triple_to_numpy(triple: tuple[int, int, int]) -> Any: ...
def triple_name(triple: tuple[int, int, int]) -> str: ...
def triple_itemsize(triple: tuple[int, int, int], subbyte_padded: bool = False) -> int: ...
def known_dtypes() -> dict[str, tuple[int, int, int]]: ...
