"""`python -m interop_core` (the main job): demo plus a verified handoff matrix."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_main_job_shows_a_verified_handoff_matrix():
    pytest.importorskip("numpy")
    out = subprocess.run([sys.executable, "-m", "interop_core"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Handoff matrix" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| from")}
    assert "numpy" in rows
    assert "WRONG VALUES" not in text and "error" not in text
    assert "| ok " in rows["numpy"]               # at least numpy -> numpy is verified
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    header = next(line for line in text.splitlines() if line.startswith("| from"))
    columns = [c.strip() for c in header.split("|")[2:-1]]
    torch_cell = rows["numpy"].split("|")[2 + columns.index("torch")].strip()
    assert torch_cell.startswith("ok"), torch_cell
    # each pair is shown against the fastest of the target's own imports of the same source
    assert "x torch.from_dlpack" in torch_cell, torch_cell
    try:
        import jax  # noqa: F401
    except ImportError:
        return
    assert "jax" in rows and "jax" in columns          # the demo extra makes the matrix 3x3
    for source, target in (("numpy", "jax"), ("jax", "numpy"), ("jax", "torch")):
        cell = rows[source].split("|")[2 + columns.index(target)].strip()
        assert cell.startswith("ok") and "x " in cell, (source, target, cell)
