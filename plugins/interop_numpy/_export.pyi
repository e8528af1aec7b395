"""Stub for the compiled numpy exporter (numpy's C API, the view read through interop_core.h)."""

from typing import Any

from interop_core import StridedMemoryView

__all__ = ["to_numpy", "exporter_capsule", "c_api_status"]

def to_numpy(view: StridedMemoryView, stream: Any = None) -> Any:
    """A ``numpy.ndarray`` over the memory of ``view`` (same pointer), whose base is ``view``."""

def exporter_capsule() -> Any:
    """The compiled exporter, as the capsule ``registry.add_exporter(exporter=...)`` takes."""

def c_api_status() -> tuple[bool, str] | None:
    """Whether ``to(x, "numpy")`` builds arrays with numpy's C API, and why."""
