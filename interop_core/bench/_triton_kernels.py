"""The Triton kernels the bench's launch section times (imported only where Triton and a CUDA
GPU are: this module imports Triton at the top).

``add4`` takes 4 runtime arguments (three pointers and ``n``), ``add16`` takes 16 (fifteen
pointers and ``n``): the two sizes of the DESIGN.md budget line for the Triton wrapper.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["add4", "add16"]


@triton.jit
def add4(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add16(out_ptr, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, n,
          BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = tl.load(a1 + offsets, mask=mask)
    total += tl.load(a2 + offsets, mask=mask) + tl.load(a3 + offsets, mask=mask)
    total += tl.load(a4 + offsets, mask=mask) + tl.load(a5 + offsets, mask=mask)
    total += tl.load(a6 + offsets, mask=mask) + tl.load(a7 + offsets, mask=mask)
    total += tl.load(a8 + offsets, mask=mask) + tl.load(a9 + offsets, mask=mask)
    total += tl.load(a10 + offsets, mask=mask) + tl.load(a11 + offsets, mask=mask)
    total += tl.load(a12 + offsets, mask=mask) + tl.load(a13 + offsets, mask=mask)
    total += tl.load(a14 + offsets, mask=mask)
    tl.store(out_ptr + offsets, total, mask=mask)
