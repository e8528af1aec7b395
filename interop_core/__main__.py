"""``python -m interop_core``: a short tour of views over the frameworks installed here.

Each installed framework hands a tensor to interop-core; the demo prints the view, proves it is
zero-copy by writing through an export of it, and hands it on to the next framework.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from . import StridedMemoryView, __version__


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _demo_numpy() -> None:
    import numpy as np

    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView.from_any(array)
    print(f"numpy array {array.shape} {array.dtype}\n  -> {view}")
    column = view[:, 1]
    print(f"  view[:, 1] -> shape={column.shape} strides={column.strides} ptr={column.ptr:#x}")
    back = np.from_dlpack(view)
    back[0, 0] = 42.0
    print(f"  np.from_dlpack(view) shares memory: array[0, 0] is now {array[0, 0]}")
    frozen = array.copy()
    frozen.flags.writeable = False
    print(f"  read-only array -> readonly={StridedMemoryView.from_any(frozen).readonly}")


def _demo_torch() -> None:
    import torch

    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()
    view = StridedMemoryView.from_any(tensor)
    print(f"torch tensor {tuple(tensor.shape)} {tensor.dtype} (transposed)\n  -> {view}")
    assert view.ptr == tensor.data_ptr() and view.strides == tensor.stride()
    again = torch.from_dlpack(view)
    again[0, 0] = 7
    print(f"  torch.from_dlpack(view) shares memory: tensor[0, 0] is now {tensor[0, 0].item()}")
    if _installed("numpy"):
        import numpy as np

        floats = torch.linspace(0, 1, 5)
        as_numpy = np.asarray(StridedMemoryView.from_any(floats))
        print(f"  torch float32 -> numpy through the view: {as_numpy} "
              f"(same pointer: {as_numpy.ctypes.data == floats.data_ptr()})")


def _demo_jax() -> None:
    import jax.numpy as jnp

    array = jnp.arange(4.0)
    view = StridedMemoryView.from_any(array)
    print(f"jax array {array.shape} {array.dtype}\n  -> {view}")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m interop_core", description=__doc__)
    parser.parse_args(argv)
    print(f"interop-core {__version__} on Python {sys.version.split()[0]}\n")
    demos = [("numpy", _demo_numpy), ("torch", _demo_torch), ("jax", _demo_jax)]
    for name, demo in demos:
        if not _installed(name):
            print(f"{name}: not installed, skipped\n")
            continue
        demo()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
