"""`import interop_core` must not drag in any framework (or numpy)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

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


# The import's time is a budget line of the bench (`python -m interop_core bench --section
# import`: median of fresh interpreters, against the 30 ms budget), not a timed test here: a
# loaded CI machine would decide it, not the code.


PROTOCOL_DUNDERS = {"__getitem__", "__dlpack__", "__dlpack_device__",
                    "__cuda_array_interface__", "__array_interface__"}


def _undocumented(module) -> list[str]:
    missing = []
    # A first-party plugin without __all__ exposes its hook alone.
    for name in getattr(module, "__all__", ("interop_core_register",)):
        obj = getattr(module, name)
        if not obj.__doc__:
            missing.append(name)
        if not isinstance(obj, type):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") and attr not in PROTOCOL_DUNDERS:
                continue
            if not callable(member) and not hasattr(member, "__get__"):
                continue  # plain class constants
            doc = getattr(member, "__doc__", None)
            if not doc or doc == type(member).__doc__:
                missing.append(f"{name}.{attr}")
    return missing


DOCUMENTED_MODULES = ("interop_core", "interop_core.dtypes", "interop_core.plugins",
                      "interop_core.hookspecs", "interop_core.testing",
                      # The first-party plugins (plugins/ in a checkout).
                      "interop_numpy", "interop_torch", "interop_cupy", "interop_numba",
                      "interop_jax", "interop_cuda_core", "interop_core.compat.cuda_core")


@pytest.mark.parametrize("module_name", DOCUMENTED_MODULES)
def test_every_public_name_method_and_property_has_a_docstring(module_name):
    module = importlib.import_module(module_name)
    assert module.__doc__, f"{module_name} has no module docstring"
    assert _undocumented(module) == []
