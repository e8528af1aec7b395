"""Type stub for the compiled StridedLayout module (see _layout.pyx for the full docs)."""

from collections.abc import Sequence
from types import EllipsisType
from typing import Any, Literal, SupportsIndex, final

__all__ = ["AxisError", "StridedLayout"]

_Shape = SupportsIndex | Sequence[SupportsIndex]
_Order = Literal["C", "F"] | Sequence[SupportsIndex]
_Key = (
    SupportsIndex
    | slice
    | EllipsisType
    | None
    | tuple[SupportsIndex | slice | EllipsisType | None, ...]
)

class AxisError(ValueError, IndexError):
    """An axis argument is out of range for the layout's number of dimensions."""

@final
class StridedLayout:
    """Shape, strides (in elements) and itemsize of strided memory; immutable."""

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
    @property
    def slice_offset(self) -> int:
        """Elements from a base pointer to element 0."""
    def __init__(
        self,
        shape: _Shape,
        strides: Sequence[SupportsIndex] | None = None,
        itemsize: SupportsIndex = 1,
        slice_offset: SupportsIndex = 0,
    ) -> None: ...
    @classmethod
    def dense(cls, shape: _Shape, itemsize: SupportsIndex, order: _Order = "C") -> StridedLayout:
        """A dense layout; ``order`` lists dims from slowest to fastest varying."""
    @classmethod
    def dense_like(
        cls, other: StridedLayout, order: Literal["K", "C", "F"] | Sequence[SupportsIndex] = "K"
    ) -> StridedLayout:
        """A dense layout with the shape, itemsize (and for "K" the stride order) of `other`."""
    @property
    def shape(self) -> tuple[int, ...]:
        """Extent of each dimension."""
    @property
    def strides(self) -> tuple[int, ...]:
        """Stride of each dimension, in elements."""
    @property
    def strides_in_bytes(self) -> tuple[int, ...]:
        """Stride of each dimension, in bytes."""
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
    @property
    def volume(self) -> int:
        """Number of elements."""
    @property
    def stride_order(self) -> tuple[int, ...]:
        """Dims sorted by |stride| descending, then extent descending, then index."""
    @property
    def is_contiguous_c(self) -> bool:
        """Dense in C order."""
    @property
    def is_contiguous_f(self) -> bool:
        """Dense in Fortran order."""
    @property
    def is_contiguous_any(self) -> bool:
        """Dense in some dimension order."""
    @property
    def is_unique(self) -> bool:
        """No two index tuples reach the same element."""
    @property
    def min_offset(self) -> int:
        """Lowest element offset reached, slice_offset included."""
    @property
    def max_offset(self) -> int:
        """Highest element offset reached, slice_offset included."""
    @property
    def required_size_in_bytes(self) -> int:
        """Bytes from the base pointer needed to hold every element."""
    @property
    def slice_offset_in_bytes(self) -> int:
        """Bytes from the base pointer to element 0."""
    @property
    def offset_bounds(self) -> tuple[int, int]:
        """(min_offset, max_offset); (slice_offset, slice_offset - 1) with no elements."""
    @property
    def is_dense(self) -> bool:
        """Contiguous in some order with slice_offset 0."""
    @property
    def merge_mask(self) -> int:
        """Bit i set: dim i can merge into the dims before it (see merged)."""
    def sliced(self, key: _Key) -> StridedLayout:
        """The layout of ``array[key]``."""
    def __getitem__(self, key: _Key) -> StridedLayout: ...
    def reshaped(self, shape: _Shape) -> StridedLayout:
        """Another shape over the same elements, without copying."""
    def permuted(self, axes: Sequence[SupportsIndex]) -> StridedLayout:
        """Dims reordered (numpy transpose)."""
    def broadcast_to(self, shape: _Shape) -> StridedLayout:
        """Broadcast by numpy's rules."""
    def squeezed(
        self, axes: SupportsIndex | Sequence[SupportsIndex] | None = None
    ) -> StridedLayout:
        """Dims of extent 1 removed."""
    def unsqueezed(self, axes: SupportsIndex | Sequence[SupportsIndex]) -> StridedLayout:
        """Dims of extent 1 inserted (numpy expand_dims)."""
    def flattened(self, start: SupportsIndex = 0, end: SupportsIndex = -1) -> StridedLayout:
        """Dims start..end (inclusive) merged into one, or ValueError."""
    def merged(
        self, start: SupportsIndex = 0, end: SupportsIndex = -1, mask: SupportsIndex | None = None
    ) -> StridedLayout:
        """Every run of adjacent dims (within start..end and mask) that can merge, merged."""
    def to_dense(
        self, order: Literal["C", "F", "K"] | Sequence[SupportsIndex] = "C"
    ) -> StridedLayout:
        """A dense layout with this shape and itemsize."""
    def repacked(
        self,
        new_itemsize: SupportsIndex,
        data_ptr: SupportsIndex | None = 0,
        axis: SupportsIndex = -1,
        keep_dim: bool = True,
    ) -> StridedLayout:
        """The same bytes seen as elements of another size, re-cut along `axis`."""
    def max_compatible_itemsize(
        self,
        max_itemsize: SupportsIndex = 16,
        data_ptr: SupportsIndex | None = 0,
        axis: SupportsIndex = -1,
    ) -> int:
        """The largest divisor of max_itemsize that repacked accepts."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __copy__(self) -> StridedLayout: ...
    def __deepcopy__(self, memo: Any) -> StridedLayout: ...
