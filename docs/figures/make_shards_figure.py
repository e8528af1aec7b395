"""Draw docs/figures/shards.png: a 2-D jax array split over a 2 x 2 device mesh, and the
shards ``interop_core.shards()`` returns for it (read from a real run, not drawn by hand).

    python docs/figures/make_shards_figure.py

jax gets four CPU devices from XLA_FLAGS (set below, before jax starts); the figure labels them
by their jax device id, as they would be cuda:0..3 on a machine with four GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import interop_core  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

OUT = Path(__file__).with_name("shards.png")
COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
ROWS, COLS = 8, 6


def _case(spec):
    mesh = Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("x", "y"))
    x = jax.device_put(np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS),
                       NamedSharding(mesh, spec))
    found = interop_core.shards(x)
    # shards() follows jax's addressable_shards, so jax's device of shard k is that list's k-th.
    devices = [s.device.id for s in x.addressable_shards]
    return mesh, found, devices


def _mesh_panel(ax, mesh, spec):
    ax.set_title(f"device mesh ('x', 'y') = (2, 2)\nPartitionSpec{tuple(spec)}", fontsize=9)
    for (i, j), device in np.ndenumerate(mesh.devices):
        ax.add_patch(Rectangle((j, 1 - i), 0.9, 0.9, color=COLOURS[device.id], alpha=0.85))
        ax.text(j + 0.45, 1.45 - i, f"device {device.id}", ha="center", va="center",
                color="white", fontsize=9, weight="bold")
    ax.text(-0.15, 1.45, "x=0", ha="right", va="center", fontsize=8)
    ax.text(-0.15, 0.45, "x=1", ha="right", va="center", fontsize=8)
    ax.text(0.45, 2.05, "y=0", ha="center", fontsize=8)
    ax.text(1.45, 2.05, "y=1", ha="center", fontsize=8)
    ax.set_xlim(-0.6, 2.1)
    ax.set_ylim(-0.3, 2.4)
    ax.axis("off")


def _array_panel(ax, found, devices):
    copies = max(s.replica for s in found) + 1
    gap = 1.5
    ax.set_title(f"global array {found.shape[0]} x {found.shape[1]}: where each shard sits"
                 + ("" if copies == 1 else "\n(one copy of the array per replica id)"),
                 fontsize=9)
    for k, (shard, device) in enumerate(zip(found, devices, strict=True)):
        rows, cols = shard.index
        left = shard.replica * (COLS + gap)
        ax.add_patch(Rectangle((left + cols.start, ROWS - rows.stop), cols.stop - cols.start,
                               rows.stop - rows.start, color=COLOURS[device], alpha=0.85,
                               ec="white", lw=1.5))
        ax.text(left + (cols.start + cols.stop) / 2, ROWS - (rows.start + rows.stop) / 2,
                f"shard {k}", ha="center", va="center", color="white", fontsize=8,
                weight="bold")
    for copy in range(copies):
        left = copy * (COLS + gap)
        for r in range(ROWS + 1):
            ax.plot([left, left + COLS], [r, r], color="white", lw=0.3)
        for c in range(COLS + 1):
            ax.plot([left + c, left + c], [0, ROWS], color="white", lw=0.3)
        if copies > 1:
            ax.text(left + COLS / 2, -0.9, f"replica {copy}", ha="center", fontsize=8)
    ax.set_xlim(-0.2, copies * (COLS + gap) - gap + 0.2)
    ax.set_ylim(-1.3, ROWS + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")


def _table_panel(ax, found, devices):
    ax.set_title("interop_core.shards(x)", fontsize=9, family="monospace")
    lines = [f"Shards(shape={found.shape}, dtype={found.dtype}, complete={found.complete})"]
    for k, (shard, device) in enumerate(zip(found, devices, strict=True)):
        index = ", ".join(f"{s.start}:{s.stop}" for s in shard.index)
        lines.append(f"[{k}] index=[{index}]  replica={shard.replica}  device {device}  "
                     f"view {shard.view.shape}")
    for i, line in enumerate(lines):
        colour = "black" if i == 0 else COLOURS[devices[i - 1]]
        ax.text(0, 0.97 - 0.1 * i, line, family="monospace", fontsize=8.5, color=colour,
                va="top", transform=ax.transAxes)
    ax.axis("off")


def main() -> None:
    specs = [PartitionSpec("x", "y"), PartitionSpec("x")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7),
                             gridspec_kw={"width_ratios": [1.0, 1.9, 2.1]},
                             layout="constrained")
    for row, spec in zip(axes, specs, strict=True):
        mesh, found, devices = _case(spec)
        _mesh_panel(row[0], mesh, spec)
        _array_panel(row[1], found, devices)
        _table_panel(row[2], found, devices)
    fig.suptitle("A jax array sharded over a 2 x 2 device mesh, and the shards that come back. "
                 "Top: split both ways. Bottom: rows split over x, each block on both devices "
                 "of y (replicas 0 and 1)", fontsize=10)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
