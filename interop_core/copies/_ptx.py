"""The strided copy kernels, written as PTX text (loaded with ``cuModuleLoadData``, no NVRTC).

Every kernel copies one *plan* (see ``_coalesce.pxd``): ``rows`` rows of ``inner_n`` elements
of ``width`` bytes, a row's start found by splitting the row index over up to
:data:`MAX_OUTER_DIMS` outer dimensions.  Strides are in bytes and may be negative (or zero on
the source).  The arguments travel as one by-value struct (the layout below, mirrored by
``KernelArgs`` in ``_copy.pyx``):

======  ==========================================================
offset  field
======  ==========================================================
0       dst (u64): address of the destination's first element
8       src (u64): address of the source's first element
16      inner_n (u64): elements per row
24      dst_inner (s64): destination stride along a row, bytes
32      src_inner (s64): source stride along a row, bytes
40      rows (u64): number of rows (product of the outer extents)
48      outer_ndim (u64): outer dimensions used, at most MAX_OUTER_DIMS
56      outer_shape[MAX_OUTER_DIMS] (u64), fastest-varying first
...     dst_outer[MAX_OUTER_DIMS] (s64), then src_outer[MAX_OUTER_DIMS] (s64)
======  ==========================================================

Two kernels per element width (1, 2, 4, 8, 16 bytes):

- ``ic_copy_rows_w<W>``: a 2-D grid of 2-D blocks; the y dimensions walk rows (grid-stride,
  ``blockDim.y`` rows per block, so short rows still fill a block), the x dimensions walk a
  row, each thread moving ``UNROLL`` elements ``blockDim.x`` apart, so a warp's loads and
  stores are consecutive along the row and every thread has several loads in flight.  The
  row's start is computed once per row, not per element.
- ``ic_copy_flat_w<W>``: one flat grid-stride loop over all elements, splitting each index;
  for rows too short to fill a block.
"""

from __future__ import annotations

__all__ = ["ARGS_BYTES", "BLOCK", "MAX_OUTER_DIMS", "UNROLL", "WIDTHS", "kernel_name",
           "ptx_source"]

MAX_OUTER_DIMS = 15
ARGS_BYTES = 56 + 24 * MAX_OUTER_DIMS
BLOCK = 256
UNROLL = 4
WIDTHS = (1, 2, 4, 8, 16)

_SHAPE = 56
_DST = 56 + 8 * MAX_OUTER_DIMS
_SRC = 56 + 16 * MAX_OUTER_DIMS


def kernel_name(kind: str, width: int) -> str:
    """The entry name of the ``kind`` ("rows" or "flat") kernel for ``width``-byte elements."""
    return f"ic_copy_{kind}_w{width}"


def _value_regs(width: int) -> str:
    if width == 1 or width == 2:
        return f"    .reg .b16 %h<{UNROLL + 1}>;\n"
    if width == 4:
        return f"    .reg .b32 %v<{UNROLL + 1}>;\n"
    return f"    .reg .b64 %q<{2 * UNROLL + 2}>;\n"


def _load(width: int, j: int, pred: str, addr: str) -> str:
    guard = f"@{pred} " if pred else ""
    if width == 1:
        return f"    {guard}ld.global.u8 %h{j}, [{addr}];\n"
    if width == 2:
        return f"    {guard}ld.global.u16 %h{j}, [{addr}];\n"
    if width == 4:
        return f"    {guard}ld.global.u32 %v{j}, [{addr}];\n"
    if width == 8:
        return f"    {guard}ld.global.u64 %q{2 * j}, [{addr}];\n"
    return f"    {guard}ld.global.v2.u64 {{%q{2 * j}, %q{2 * j + 1}}}, [{addr}];\n"


def _store(width: int, j: int, pred: str, addr: str) -> str:
    guard = f"@{pred} " if pred else ""
    if width == 1:
        return f"    {guard}st.global.u8 [{addr}], %h{j};\n"
    if width == 2:
        return f"    {guard}st.global.u16 [{addr}], %h{j};\n"
    if width == 4:
        return f"    {guard}st.global.u32 [{addr}], %v{j};\n"
    if width == 8:
        return f"    {guard}st.global.u64 [{addr}], %q{2 * j};\n"
    return f"    {guard}st.global.v2.u64 [{addr}], {{%q{2 * j}, %q{2 * j + 1}}};\n"


def _split_row(label: str) -> str:
    """%row_in (%rd40) -> byte offsets %doff (%rd41), %soff (%rd42); uses %rd43..%rd48."""
    out = ["    mov.u64 %rd43, %rd40;\n    mov.u64 %rd41, 0;\n    mov.u64 %rd42, 0;\n"]
    for d in range(MAX_OUTER_DIMS):
        out.append(
            f"    setp.le.u64 %p7, %rd7, {d};\n"
            f"    @%p7 bra {label};\n"
            f"    ld.param.u64 %rd44, [args+{_SHAPE + 8 * d}];\n"
            f"    ld.param.u64 %rd45, [args+{_DST + 8 * d}];\n"
            f"    ld.param.u64 %rd46, [args+{_SRC + 8 * d}];\n"
            "    div.u64 %rd47, %rd43, %rd44;\n"
            "    mul.lo.u64 %rd48, %rd47, %rd44;\n"
            "    sub.u64 %rd48, %rd43, %rd48;\n"
            "    mad.lo.s64 %rd41, %rd48, %rd45, %rd41;\n"
            "    mad.lo.s64 %rd42, %rd48, %rd46, %rd42;\n"
            "    mov.u64 %rd43, %rd47;\n")
    out.append(f"{label}:\n")
    return "".join(out)


_PROLOGUE = """\
    ld.param.u64 %rd1, [args+0];
    ld.param.u64 %rd2, [args+8];
    ld.param.u64 %rd3, [args+16];
    ld.param.u64 %rd4, [args+24];
    ld.param.u64 %rd5, [args+32];
    ld.param.u64 %rd6, [args+40];
    ld.param.u64 %rd7, [args+48];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
"""


def _rows_kernel(width: int) -> str:
    name = kernel_name("rows", width)
    body = [f".visible .entry {name}(\n    .param .align 8 .b8 args[{ARGS_BYTES}]\n)\n{{\n",
            f"    .reg .pred %p<{UNROLL + 8}>;\n    .reg .b32 %r<10>;\n    .reg .b64 %rd<90>;\n",
            _value_regs(width), _PROLOGUE,
            # first = blockIdx.x * blockDim.x * UNROLL + threadIdx.x; step = gridDim.x *
            # blockDim.x * UNROLL; the UNROLL elements of a thread are blockDim.x apart.
            "    mov.u32 %r1, %ctaid.x;\n    mov.u32 %r2, %ntid.x;\n    mov.u32 %r3, %tid.x;\n"
            "    mov.u32 %r4, %nctaid.x;\n"
            "    cvt.u64.u32 %rd8, %r3;\n"
            "    mul.wide.u32 %rd9, %r1, %r2;\n"
            f"    mul.lo.u64 %rd9, %rd9, {UNROLL};\n"
            "    add.u64 %rd8, %rd8, %rd9;\n"
            "    mul.wide.u32 %rd10, %r4, %r2;\n"
            f"    mul.lo.u64 %rd11, %rd10, {UNROLL};\n"
            "    cvt.u64.u32 %rd12, %r2;\n"
            "    mul.lo.s64 %rd30, %rd12, %rd4;\n"      # dst bytes between a thread's elements
            "    mul.lo.s64 %rd31, %rd12, %rd5;\n"      # src bytes between them
            "    mul.lo.s64 %rd32, %rd11, %rd4;\n"      # dst bytes per loop step
            "    mul.lo.s64 %rd33, %rd11, %rd5;\n"      # src bytes per loop step
            # row = blockIdx.y * blockDim.y + threadIdx.y; step gridDim.y * blockDim.y
            "    mov.u32 %r5, %ctaid.y;\n    mov.u32 %r6, %nctaid.y;\n"
            "    mov.u32 %r7, %ntid.y;\n    mov.u32 %r8, %tid.y;\n"
            "    cvt.u64.u32 %rd13, %r8;\n"
            "    mad.wide.u32 %rd13, %r5, %r7, %rd13;\n"
            "    mul.wide.u32 %rd14, %r6, %r7;\n"
            "ROW:\n"
            "    setp.ge.u64 %p0, %rd13, %rd6;\n"
            "    @%p0 bra END;\n"
            "    mov.u64 %rd40, %rd13;\n",
            _split_row("SPLIT_DONE"),
            # i = first; addresses of element i in this row
            "    mov.u64 %rd25, %rd8;\n"
            "    mad.lo.s64 %rd26, %rd25, %rd4, %rd41;\n"
            "    add.s64 %rd26, %rd26, %rd1;\n"
            "    mad.lo.s64 %rd27, %rd25, %rd5, %rd42;\n"
            "    add.s64 %rd27, %rd27, %rd2;\n"
            "INNER:\n"
            "    setp.ge.u64 %p0, %rd25, %rd3;\n"
            "    @%p0 bra NEXT_ROW;\n"]
    for j in range(UNROLL):
        # element i + j * blockDim.x: in range?  its source address
        body.append(f"    mad.lo.u64 %rd{50 + j}, %rd12, {j}, %rd25;\n"
                    f"    setp.lt.u64 %p{1 + j}, %rd{50 + j}, %rd3;\n"
                    f"    mad.lo.s64 %rd{60 + j}, %rd31, {j}, %rd27;\n"
                    f"    mad.lo.s64 %rd{70 + j}, %rd30, {j}, %rd26;\n")
    for j in range(UNROLL):
        body.append(_load(width, j, f"%p{1 + j}", f"%rd{60 + j}"))
    for j in range(UNROLL):
        body.append(_store(width, j, f"%p{1 + j}", f"%rd{70 + j}"))
    body.append("    add.u64 %rd25, %rd25, %rd11;\n"
                "    add.s64 %rd26, %rd26, %rd32;\n"
                "    add.s64 %rd27, %rd27, %rd33;\n"
                "    bra INNER;\n"
                "NEXT_ROW:\n"
                "    add.u64 %rd13, %rd13, %rd14;\n"
                "    bra ROW;\n"
                "END:\n    ret;\n}\n")
    return "".join(body)


def _flat_kernel(width: int) -> str:
    name = kernel_name("flat", width)
    return "".join([
        f".visible .entry {name}(\n    .param .align 8 .b8 args[{ARGS_BYTES}]\n)\n{{\n",
        "    .reg .pred %p<8>;\n    .reg .b32 %r<8>;\n    .reg .b64 %rd<90>;\n",
        _value_regs(width), _PROLOGUE,
        # total = rows * inner_n; i = blockIdx.x * blockDim.x + threadIdx.x, grid-stride
        "    mul.lo.u64 %rd20, %rd6, %rd3;\n"
        "    mov.u32 %r1, %ctaid.x;\n    mov.u32 %r2, %ntid.x;\n    mov.u32 %r3, %tid.x;\n"
        "    mov.u32 %r4, %nctaid.x;\n"
        "    cvt.u64.u32 %rd21, %r3;\n"
        "    mad.wide.u32 %rd21, %r1, %r2, %rd21;\n"
        "    mul.wide.u32 %rd22, %r4, %r2;\n"
        "LOOP:\n"
        "    setp.ge.u64 %p0, %rd21, %rd20;\n"
        "    @%p0 bra END;\n"
        # row = i / inner_n, k = i - row * inner_n
        "    div.u64 %rd40, %rd21, %rd3;\n"
        "    mul.lo.u64 %rd23, %rd40, %rd3;\n"
        "    sub.u64 %rd23, %rd21, %rd23;\n",
        _split_row("SPLIT_DONE"),
        "    mad.lo.s64 %rd26, %rd23, %rd4, %rd41;\n"
        "    add.s64 %rd26, %rd26, %rd1;\n"
        "    mad.lo.s64 %rd27, %rd23, %rd5, %rd42;\n"
        "    add.s64 %rd27, %rd27, %rd2;\n",
        _load(width, 0, "", "%rd27"),
        _store(width, 0, "", "%rd26"),
        "    add.u64 %rd21, %rd21, %rd22;\n"
        "    bra LOOP;\n"
        "END:\n    ret;\n}\n"])


def ptx_source() -> str:
    """The PTX module: a rows and a flat kernel for each element width."""
    parts = ["// interop-core strided copy kernels (generated by interop_core/copies/_ptx.py).\n"
             ".version 7.0\n.target sm_52\n.address_size 64\n\n"]
    for width in WIDTHS:
        parts.append(_rows_kernel(width))
        parts.append("\n")
        parts.append(_flat_kernel(width))
        parts.append("\n")
    return "".join(parts)
