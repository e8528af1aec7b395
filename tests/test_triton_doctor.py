"""``python -m interop_core doctor`` says what the Triton wrapper does, in one line.

Without Triton it says how to install it; with a Triton whose layout the wrapper knows, that it
validates itself on the first compile; once a process fell back to Triton's own launch, why.
Doctor never imports Triton unless ``--import`` is given.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _doctor(*args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "plugins"),
                                                     env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "interop_core", "doctor", *args],
                          capture_output=True, text=True, env=env, timeout=300, check=True)
    return done.stdout


def test_doctor_reports_the_triton_wrapper_in_one_line_without_importing_triton():
    report = json.loads(_doctor("--json"))["triton_wrapper"]
    installed = importlib.util.find_spec("triton") is not None
    assert report["installed"] is installed
    assert "\n" not in report["reason"]
    if not installed:
        assert report["reason"] == "Triton is not installed (pip install triton)"
        assert "Triton wrapper  not installed" in _doctor()
    else:
        assert report["mode"] is None            # nothing was compiled in that process
        text = _doctor()
        assert "Triton wrapper  Triton " in text and "not validated yet" in text
        assert report["reason"] in text


def test_a_process_that_fell_back_says_why():
    pytest.importorskip("triton", reason="needs Triton (pip install triton)")
    from interop_core.__main__ import _doctor_report
    from interop_core.launch import _triton, _triton_launch

    saved = dict(_triton._state)
    try:
        _triton._fall_back("Triton 9.9: its compiled-kernel layout is not known to interop-core")
        report = _doctor_report(False)["triton_wrapper"]
        assert report["mode"] == "fallback"
        assert report["reason"].startswith("Triton 9.9: its compiled-kernel layout")
    finally:
        _triton._state.clear()
        _triton._state.update(saved)
        _triton_launch._set_process_mode(0)
