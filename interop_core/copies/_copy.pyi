from typing import Any

from ..core._layout import StridedLayout
from ..core._view import StridedMemoryView

__all__ = ["copy", "empty_like", "export_copy", "place"]

def copy(dst: Any, src: Any, stream: Any = None) -> StridedMemoryView: ...
def empty_like(
    like: Any,
    device: Any = None,
    layout: str | StridedLayout | None = None,
    stream: Any = None,
) -> StridedMemoryView: ...
def export_copy(view: StridedMemoryView, device: Any, stream: Any) -> StridedMemoryView: ...
def place(view: StridedMemoryView, device: Any, copy: bool | None, stream: Any) -> StridedMemoryView: ...
