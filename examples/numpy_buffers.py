"""Host buffers into views and out again, without a copy.

Run: python examples/numpy_buffers.py
"""

from __future__ import annotations

import array
import ctypes

import numpy as np

from interop_core import Buffer, StridedLayout, StridedMemoryView


def main() -> None:
    # Any buffer-protocol object becomes a view; the view holds the exporter's buffer.
    samples = array.array("f", [0.5, 1.5, 2.5, 3.5])
    view = StridedMemoryView.from_any(samples)
    print("array.array ->", view)

    # ...and leaves again through the buffer protocol, the array interface or DLPack.
    as_numpy = np.asarray(view)
    as_numpy[0] = 9.0
    print("numpy wrote through the view:", samples[0])

    # Raw memory from elsewhere (here ctypes) with an explicit layout and element type.
    raw = (ctypes.c_uint8 * 24)(*range(24))
    buffer = Buffer.from_handle(ctypes.addressof(raw), 24, owner=raw)
    columns = StridedMemoryView.from_buffer(buffer, StridedLayout.dense((4, 6), 1, "F"), "uint8")
    print("column-major 4x6 over ctypes memory:\n", np.from_dlpack(columns))

    # Reinterpret: pairs of float32 as complex64, same memory.
    pairs = StridedMemoryView.from_any(np.arange(8, dtype=np.float32))
    print("float32 pairs as complex64:", np.asarray(pairs.view(dtype=np.complex64)))


if __name__ == "__main__":
    main()
