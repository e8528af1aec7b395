"""The kernels the Triton wrapper validates itself with, once per process, on a GPU.

Imported only by the wrapper's first compile (it imports Triton and torch at the top): each
case runs through the wrapper and through Triton's own ``kernel[grid](...)`` on separate
outputs, and the outputs must be equal bit for bit.  Together the cases pass every kind of
parameter the wrapper lays out: pointers of three dtypes (aligned and not), an i32 and an i64
integer, one divisible by 16, an integer equal to 1 (a constexpr) and one that is not, a u64, a
float, a bool, ``None`` (a constexpr), a constexpr block size, and a grid callable.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["compare"]


@triton.jit
def canary(x_ptr, out_ptr, wide_ptr, half_ptr, n, big, alpha, flag, step, bias_ptr, seed,
           BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * step, mask=mask, other=0.0)
    y = x * alpha
    if flag:
        y = y + 1.0
    if bias_ptr is not None:
        y = y + tl.load(bias_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, y, mask=mask)
    tl.store(wide_ptr + offsets, offsets.to(tl.int64) * 3 + big + seed.to(tl.int64),
             mask=mask)
    tl.store(half_ptr + offsets, (x * 2.0).to(tl.float16), mask=mask)


def _case(n: int, step: int, bias: bool, offset: int, big: int, alpha: float, flag: bool,
          seed: int, block: int, callable_grid: bool):
    device = torch.device("cuda", torch.cuda.current_device())
    x = torch.linspace(-3, 5, n * step + offset, device=device)[offset:]
    bias_tensor = torch.arange(n, dtype=torch.float32, device=device) if bias else None

    def outputs():
        return (torch.full((n,), -1.0, device=device),
                torch.zeros(n, dtype=torch.int64, device=device),
                torch.zeros(n, dtype=torch.float16, device=device))

    grid = ((lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)) if callable_grid
            else (triton.cdiv(n, block),))

    def call(kernel, outs):
        kernel[grid](x, outs[0], outs[1], outs[2], n, big, alpha, flag, step, bias_tensor, seed,
                     BLOCK=block)

    return outputs, call


_CASES = {
    "aligned, i64, u64, None, grid callable": dict(
        n=1000, step=1, bias=False, offset=0, big=2 ** 40, alpha=1.5, flag=True,
        seed=2 ** 63 + 5, block=128, callable_grid=True),
    "unaligned, i32 divisible by 16, bias": dict(
        n=1024, step=2, bias=True, offset=1, big=-7, alpha=-0.25, flag=False, seed=3,
        block=256, callable_grid=False),
}


def compare(triton_kernel) -> str | None:
    """Run every case through ``triton_kernel(canary)`` and Triton's own launch.

    Returns
    -------
    str or None
        What differed (one line), or None when every output is equal bit for bit and every
        case ran on the wrapper's own launch.
    """
    from . import _triton_launch

    fast = triton_kernel(canary, writable=("out_ptr", "wide_ptr", "half_ptr"))
    for name, spec in _CASES.items():
        outputs, call = _case(**spec)
        ours, theirs = outputs(), outputs()
        call(fast, ours)
        call(canary, theirs)
        torch.cuda.synchronize()
        for label, a, b in zip(("out", "wide", "half"), ours, theirs, strict=True):
            if not torch.equal(a, b):
                return f"the validation case {name!r} wrote other {label} values than Triton"
    for key, entry in _triton_launch._entries(fast).items():
        if not isinstance(entry, _triton_launch.CompiledLaunch):
            return fast.reasons.get(key, "a validation case went to Triton's own launch")
    return None
