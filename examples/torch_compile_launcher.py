"""A ``launch_args`` launcher inside ``torch.compile``: wrap it as a ``torch.library.custom_op``.

torch.compile traces a function with fake tensors (shapes and dtypes, no memory), so a launcher
must not run while it traces: a ``view()`` / ``launch_args()`` of a fake tensor is refused with
an error naming this route.  Registered as a custom op with a fake implementation, the launcher
is opaque to the tracer (the fake implementation tells it the output's shape and dtype) and runs
with real tensors when the compiled graph does.

The launcher is ``examples/kernel_launcher.py``'s ``AxpyLauncher`` (C on the CPU, PTX on a GPU).

Run: python examples/torch_compile_launcher.py   (torch, numpy, jax and a C compiler; CPU)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_launcher import AxpyLauncher, build_c_kernels  # noqa: E402

import interop_core  # noqa: E402

_launcher: AxpyLauncher | None = None


@torch.library.custom_op("interop_examples::axpy", mutates_args=())
def axpy(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
    """``a * x + y`` by the launcher (contiguous float32 tensors of one shape)."""
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream(x.device) if x.is_cuda else None
    _launcher(out, x.contiguous(), y.contiguous(), a, x.numel(), stream=stream)
    return out


@axpy.register_fake
def _(x, y, a):
    return torch.empty_like(x)


@torch.compile(fullgraph=True)
def model(x, y):
    return torch.relu(axpy(x * 2, y, 0.5)) - 1


def main() -> int:
    global _launcher
    with tempfile.TemporaryDirectory() as folder:
        lib = build_c_kernels(Path(folder))
        if lib is None:
            print("skipped: no C compiler (cc or gcc) to build axpy.c")
            return 0
        _launcher = AxpyLauncher(lib)
        x = torch.linspace(-4, 4, 64)
        y = torch.ones(64)
        got = model(x, y)
        want = torch.relu(0.5 * (x * 2) + y) - 1
        assert torch.allclose(got, want)
        print("torch.compile(fullgraph=True) of a graph calling the launcher as a custom op: ok")
        print(f"  {_launcher.compiled} kernel compiled, first values {got[:4].tolist()}")

        # What the tracer would have handed the launcher had it not been a custom op:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            fake = torch.empty(64)
        try:
            interop_core.launch_args([fake, fake, 0.5])
        except BufferError as exc:
            print("a fake tensor is refused:", str(exc)[:160], "...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
