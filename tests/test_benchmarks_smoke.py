"""The benchmark scripts run end to end (a smoke run: short batches, no timing assertions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize("script", ["bench_views.py", "bench_dispatch.py"])
def test_benchmark_runs_in_quick_mode_and_prints_a_table(script, tmp_path):
    pytest.importorskip("numpy")
    out = tmp_path / "table.md"
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", "--markdown",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "| --- |" in result.stdout and "interop" in out.read_text() or "view()" in out.read_text()
