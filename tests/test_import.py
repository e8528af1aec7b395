"""`import interop_core` must be cheap and must not drag in any framework (or numpy)."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = ("torch", "cupy", "jax", "jaxlib", "numba", "tensorflow", "numpy", "ml_dtypes")

PROBE = """
import json, sys, time
start = time.perf_counter()
import interop_core
elapsed = time.perf_counter() - start
print(json.dumps({"ms": elapsed * 1e3, "modules": sorted(sys.modules)}))
"""


def _import_once() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_import_imports_no_framework_and_not_numpy():
    modules = set(_import_once()["modules"])
    imported = sorted(name for name in FRAMEWORKS if name in modules)
    assert imported == [], f"import interop_core imported {imported}"


def test_import_takes_under_30_ms():
    # Best of three fresh interpreters, so one slow disk read does not decide it.
    best = min(_import_once()["ms"] for _ in range(3))
    assert best < 30.0, f"import interop_core took {best:.1f} ms (budget 30 ms)"


def test_public_names_are_exported_and_documented():
    import interop_core

    for name in interop_core.__all__:
        obj = getattr(interop_core, name)
        assert obj.__doc__, f"interop_core.{name} has no docstring"
