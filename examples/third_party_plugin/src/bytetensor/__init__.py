"""bytetensor: a tiny strided tensor over any writable or read-only buffer (pure Python).

This is the "framework" of the example plugin: a stand-in for a third-party array library that
interop-core has never heard of.  It knows nothing about interop-core.  A :class:`ByteTensor`
is a byte buffer plus an offset, a shape, strides in *bytes* and a dtype name, like the
metadata of most array libraries.

>>> t = ByteTensor.zeros((2, 3), "float32")
>>> t.shape, t.strides, t.dtype
((2, 3), (12, 4), 'float32')
>>> t.T.strides
(4, 12)
>>> t[:, 1:].shape
(2, 2)
"""

from __future__ import annotations

import ctypes
import struct

__all__ = ["DTYPES", "ByteTensor", "CTensor", "ShardedByteTensor", "buffer_address"]
__version__ = "0.1.0"

# The same idea with its metadata in a C struct (ctensor.h), as compiled array libraries keep
# theirs: what interop_bytetensor's compiled reader reads.
from ._ctensor import CTensor  # noqa: E402

#: Supported dtype names -> (itemsize, struct format character).
DTYPES: dict[str, tuple[int, str]] = {
    "bool": (1, "?"),
    "int8": (1, "b"),
    "uint8": (1, "B"),
    "int16": (2, "h"),
    "uint16": (2, "H"),
    "int32": (4, "i"),
    "uint32": (4, "I"),
    "int64": (8, "q"),
    "uint64": (8, "Q"),
    "float16": (2, "e"),
    "float32": (4, "f"),
    "float64": (8, "d"),
}


class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer, declared from the C-API documentation; only `buf` is read.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),  # borrowed here; PyBuffer_Release drops the real reference
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# Item access gives function objects of our own: attribute access returns ones shared with
# every other user of ctypes.pythonapi, whose argtypes another module may overwrite.
_get_buffer = ctypes.pythonapi["PyObject_GetBuffer"]
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi["PyBuffer_Release"]
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def buffer_address(obj) -> int:
    """Address of the first byte of a buffer-protocol object (read-only buffers included).

    Parameters
    ----------
    obj : buffer-protocol object
        A bytearray, bytes, memoryview, array.array, mmap, ...

    Returns
    -------
    int
        The address.  It stays valid only while someone holds an export of the buffer
        (a :class:`ByteTensor` holds a memoryview for exactly that reason).
    """
    view = _PyBuffer()
    _get_buffer(obj, ctypes.byref(view), 0)  # raises TypeError for non-buffers
    try:
        return view.buf or 0
    finally:
        _release_buffer(ctypes.byref(view))


def _dense_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class ByteTensor:
    """A strided tensor over a byte buffer.

    Parameters
    ----------
    buffer : buffer-protocol object
        The memory, wrapped without a copy.  A memoryview of it is held for the tensor's
        lifetime, so a bytearray cannot be resized (and its memory moved) under the tensor.
    shape : tuple of int
        Extent of each dimension.
    dtype : str
        One of :data:`DTYPES`.
    strides : tuple of int, optional
        Byte step of each dimension; C-contiguous when omitted.
    offset : int, optional
        Bytes from the start of `buffer` to element 0.
    readonly : bool, optional
        Forbid writes even when the buffer is writable.  Read-only buffers are always read-only.

    Raises
    ------
    ValueError
        If the dtype is unknown or an element falls outside the buffer.
    """

    __slots__ = ("_mem", "address", "buffer", "dtype", "itemsize", "offset", "readonly",
                 "shape", "strides", "__weakref__")

    def __init__(self, buffer, shape, dtype="float32", strides=None, offset=0, readonly=False):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
        # _mem pins the buffer's memory (a live export forbids resizing a bytearray).
        self._mem = memoryview(buffer).cast("B")
        #: The object the memory belongs to (kept alive by the tensor).
        self.buffer = buffer
        self.address = buffer_address(self._mem)
        self.dtype = dtype
        self.itemsize = DTYPES[dtype][0]
        self.shape = tuple(int(n) for n in shape)
        self.strides = (_dense_strides(self.shape, self.itemsize) if strides is None
                        else tuple(int(s) for s in strides))
        self.offset = int(offset)
        self.readonly = bool(readonly) or self._mem.readonly
        if len(self.strides) != len(self.shape) or any(n < 0 for n in self.shape):
            raise ValueError(f"bad shape {self.shape} / strides {self.strides}")
        if 0 not in self.shape:
            lo = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.shape, strict=True) if s < 0)
            hi = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.shape, strict=True) if s > 0)
            if lo < 0 or hi + self.itemsize > len(self._mem):
                raise ValueError(f"elements span bytes [{lo}, {hi + self.itemsize}) outside a "
                                 f"buffer of {len(self._mem)} bytes")

    @classmethod
    def zeros(cls, shape, dtype="float32"):
        """A new C-contiguous tensor of zeros backed by a fresh bytearray."""
        shape = tuple(shape)
        return cls(bytearray(_count(shape) * DTYPES[dtype][0]), shape, dtype)

    @classmethod
    def arange(cls, count, dtype="float32"):
        """A 1-D tensor holding 0, 1, ..., count - 1."""
        t = cls.zeros((count,), dtype)
        struct.pack_into(f"<{count}{DTYPES[dtype][1]}", t._mem, 0, *range(count))
        return t

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def data_ptr(self) -> int:
        """Address of element 0."""
        return self.address + self.offset

    @property
    def T(self) -> ByteTensor:  # noqa: N802 - the usual array-library name
        """The tensor with its dimensions reversed (no copy)."""
        return self.transpose()

    def _derive(self, shape, strides, offset) -> ByteTensor:
        return ByteTensor(self.buffer, shape, self.dtype, strides, offset, self.readonly)

    def reshape(self, *shape) -> ByteTensor:
        """A new shape for a C-contiguous tensor (no copy)."""
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if self.strides != _dense_strides(self.shape, self.itemsize):
            raise ValueError("reshape needs a C-contiguous tensor")
        return self._derive(shape, None, self.offset)

    def transpose(self, *axes) -> ByteTensor:
        """Permute the dimensions (no copy); reverses them when no axes are given."""
        axes = tuple(axes[0]) if len(axes) == 1 and not isinstance(axes[0], int) else axes
        axes = axes or tuple(reversed(range(self.ndim)))
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"{axes} is not a permutation of {self.ndim} axes")
        return self._derive([self.shape[a] for a in axes], [self.strides[a] for a in axes],
                            self.offset)

    def __getitem__(self, key) -> ByteTensor:
        """Basic indexing with ints and slices (any step); always returns a tensor, 0-d included."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.ndim:
            raise IndexError(f"{len(key)} indices for a {self.ndim}-d tensor")
        offset, shape, strides = self.offset, [], []
        for dim, extent in enumerate(self.shape):
            k = key[dim] if dim < len(key) else slice(None)
            if isinstance(k, slice):
                start, stop, step = k.indices(extent)
                count = len(range(start, stop, step))
                if count:
                    offset += start * self.strides[dim]
                shape.append(count)
                strides.append(self.strides[dim] * step)
            else:
                i = int(k) + extent if int(k) < 0 else int(k)
                if not 0 <= i < extent:
                    raise IndexError(f"index {k} out of range for dimension {dim} of {extent}")
                offset += i * self.strides[dim]
        return self._derive(shape, strides, offset)

    def item(self):
        """The value of a one-element tensor."""
        if _count(self.shape) != 1:
            raise ValueError("item() needs exactly one element")
        return struct.unpack_from("<" + DTYPES[self.dtype][1], self._mem, self.offset)[0]

    def tolist(self):
        """The elements as nested lists (a scalar for a 0-d tensor)."""
        if not self.shape:
            return self.item()
        return [self[i].tolist() for i in range(self.shape[0])]

    def __repr__(self) -> str:
        return (f"ByteTensor(shape={self.shape}, strides={self.strides}, dtype={self.dtype!r}, "
                f"offset={self.offset}, readonly={self.readonly})")


class ShardedByteTensor:
    """A tensor split into row blocks, each a :class:`ByteTensor` of its own (no copy).

    The stand-in for a framework's sharded array type: a global ``shape`` and ``dtype``, and
    ``blocks`` that each hold rows ``offsets[i]:offsets[i] + blocks[i].shape[0]``.

    >>> t = ShardedByteTensor.split(ByteTensor.arange(12, "int32").reshape(6, 2), 3)
    >>> t.shape, t.offsets, [b.shape for b in t.blocks]
    ((6, 2), (0, 2, 4), [(2, 2), (2, 2), (2, 2)])

    Parameters
    ----------
    blocks : sequence of ByteTensor
        Row blocks, top to bottom, of one dtype and the same trailing dimensions.

    Raises
    ------
    ValueError
        If there are no blocks, or they differ in dtype or trailing dimensions.
    """

    __slots__ = ("blocks", "dtype", "offsets", "shape")

    def __init__(self, blocks):
        blocks = tuple(blocks)
        if not blocks:
            raise ValueError("a ShardedByteTensor needs at least one block")
        first = blocks[0]
        if any(b.dtype != first.dtype or b.shape[1:] != first.shape[1:] or not b.shape
               for b in blocks):
            raise ValueError("blocks must share a dtype and trailing dimensions, and be >= 1-d")
        offsets, row = [], 0
        for b in blocks:
            offsets.append(row)
            row += b.shape[0]
        self.blocks = blocks
        self.dtype = first.dtype
        self.offsets = tuple(offsets)
        self.shape = (row, *first.shape[1:])

    @classmethod
    def split(cls, tensor, parts):
        """``tensor`` cut into ``parts`` row blocks (views of its memory, no copy)."""
        rows = tensor.shape[0]
        bounds = [rows * i // parts for i in range(parts + 1)]
        return cls(tensor[bounds[i]:bounds[i + 1]] for i in range(parts))

    def __repr__(self) -> str:
        return f"ShardedByteTensor(shape={self.shape}, dtype={self.dtype!r}, blocks={len(self.blocks)})"


def _count(shape) -> int:
    count = 1
    for n in shape:
        count *= n
    return count
