"""The pytest plugin behind the ``pytest11`` entry point ``interop_core``.

pytest loads this module in every session of an environment where interop-core is installed, so
it is kept inert: it imports nothing from interop-core or any framework and adds no tests.  The
kit's tests exist only where a test module subclasses
:class:`interop_core.testing.PluginConformance`; this plugin registers the marker those tests
carry (so ``--strict-markers`` accepts it) and names the kit in the report header once it is in
use.
"""

from __future__ import annotations

import sys

__all__ = ["MARKER", "pytest_configure", "pytest_report_collectionfinish"]

#: Marker the kit puts on each of its tests; select them with ``-m interop_core_conformance``.
MARKER = "interop_core_conformance"


def pytest_configure(config):
    """Register the kit's marker.

    Parameters
    ----------
    config : pytest.Config
    """
    config.addinivalue_line(
        "markers", f"{MARKER}: a check of the interop-core plugin conformance kit "
                   "(interop_core.testing.PluginConformance)")


def pytest_report_collectionfinish(config, start_path, items):
    """Say which plugins the kit checks, when a test module uses it (nothing otherwise).

    Parameters
    ----------
    config : pytest.Config
    start_path : pathlib.Path
    items : list of pytest.Item

    Returns
    -------
    str or None
    """
    if "interop_core.testing._kit" not in sys.modules:  # the kit is not in use: stay silent
        return None
    names = sorted({item.cls.plugin_name for item in items
                    if item.get_closest_marker(MARKER) is not None
                    and getattr(item, "cls", None) is not None
                    and isinstance(getattr(item.cls, "plugin_name", None), str)})
    return f"interop-core conformance kit: plugin(s) {', '.join(names)}" if names else None
