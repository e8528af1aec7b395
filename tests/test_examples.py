"""The runnable examples run (those whose frameworks and hardware exist here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# An example that imports one of these where it is not installed is skipped, naming it.
FRAMEWORKS = ("torch", "jax", "cupy", "numba", "triton")


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script):
    pytest.importorskip("numpy")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    missing = re.search(r"ModuleNotFoundError: No module named '(\w+)'", result.stderr)
    if result.returncode != 0 and missing and missing.group(1) in FRAMEWORKS:
        pytest.skip(f"{script.name} needs {missing.group(1)}, which is not installed")
    assert result.returncode == 0, result.stderr
