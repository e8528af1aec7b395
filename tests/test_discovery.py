"""Entry-point discovery with faked installed distributions, each run in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD_PLUGIN = '''
import interop_core

def read(obj, stream):
    from interop_core import StridedMemoryView
    return StridedMemoryView.from_pointer(obj.address, (obj.n,), dtype="uint8", owner=obj)

@interop_core.hookimpl
def interop_core_register(registry):
    registry.add_type("fakeframework.arrays:Array", read)
    registry.add_exporter("fakeframework", lambda view, stream: view)
'''

FRAMEWORK = '''
import ctypes

class Array:
    def __init__(self, n):
        self.storage = (ctypes.c_uint8 * n)()
        self.address = ctypes.addressof(self.storage)
        self.n = n
'''

BROKEN_IMPORT = "raise ImportError('this plugin needs a library that is missing')\n"

BROKEN_HOOK = '''
import interop_core

@interop_core.hookimpl
def interop_core_register(registry):
    raise RuntimeError("the hook exploded")
'''

MISSING_FRAMEWORK = '''
import interop_core

@interop_core.hookimpl
def interop_core_register(registry):
    registry.add_type("framework_that_is_not_installed:Tensor", "dlpack")
'''


def _distribution(site: Path, dist: str, module: str, source: str, entry_name: str) -> None:
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[interop_core.plugins]\n{entry_name} = {module}\n")


@pytest.fixture
def site(tmp_path):
    _distribution(tmp_path, "fake-good", "fake_good_plugin", GOOD_PLUGIN, "good")
    _distribution(tmp_path, "fake-broken-import", "fake_broken_import", BROKEN_IMPORT,
                  "broken-import")
    _distribution(tmp_path, "fake-broken-hook", "fake_broken_hook", BROKEN_HOOK, "broken-hook")
    _distribution(tmp_path, "fake-missing", "fake_missing", MISSING_FRAMEWORK, "missing")
    (tmp_path / "fakeframework").mkdir()
    (tmp_path / "fakeframework" / "__init__.py").write_text("")
    (tmp_path / "fakeframework" / "arrays.py").write_text(FRAMEWORK)
    return tmp_path


def _run(site: Path, body: str, **env: str) -> dict:
    script = textwrap.dedent('''
        import json, sys, warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import interop_core
            statuses = {p.name: [p.status, p.distribution, p.version, list(p.claims), p.reason]
                        for p in interop_core.plugin_status()}
        result = {"statuses": statuses,
                  "warnings": [str(w.message) for w in caught
                               if w.category.__name__ == "PluginLoadWarning"],
                  "framework_imported": "fakeframework" in sys.modules}
    ''') + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path]), **env}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=environment, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_installed_plugins_are_discovered_with_their_distribution_and_version(site):
    result = _run(site, "")
    status, dist, version, claims, _ = result["statuses"]["good"]
    assert (status, dist, version) == ("loaded", "fake-good", "1.2.3")
    assert claims == ["fakeframework.arrays:Array"]


def test_discovery_imports_no_framework(site):
    assert _run(site, "")["framework_imported"] is False


def test_broken_plugins_warn_once_and_are_skipped(site):
    result = _run(site, "interop_core.plugin_status()  # a second look warns no more")
    statuses = result["statuses"]
    assert statuses["broken-import"][0] == "failed"
    assert "ImportError" in statuses["broken-import"][4]
    assert statuses["broken-hook"][0] == "failed"
    assert "the hook exploded" in statuses["broken-hook"][4]
    assert statuses["good"][0] == "loaded"
    assert len(result["warnings"]) == 2
    assert any("broken-import" in w for w in result["warnings"])
    assert any("broken-hook" in w for w in result["warnings"])


EXITS_AT_IMPORT = "import sys\nsys.exit('this plugin needs a library that is missing')\n"

EXITS_IN_HOOK = '''
import sys
import interop_core

@interop_core.hookimpl
def interop_core_register(registry):
    sys.exit(3)
'''


def test_a_plugin_that_exits_is_skipped_and_the_program_and_discovery_go_on(site):
    # Named to load before "good": an exit that escaped would stop the rest of discovery, or
    # end the user's program from inside whatever call triggered it.
    _distribution(site, "fake-exits-import", "fake_exits_import", EXITS_AT_IMPORT, "a-exits")
    _distribution(site, "fake-exits-hook", "fake_exits_hook", EXITS_IN_HOOK, "b-exits")
    statuses = _run(site, "")["statuses"]
    assert statuses["a-exits"][0] == "failed" and "SystemExit" in statuses["a-exits"][4]
    assert statuses["b-exits"][0] == "failed" and "SystemExit" in statuses["b-exits"][4]
    assert statuses["good"][0] == "loaded"


def test_a_plugin_whose_framework_is_missing_says_so(site):
    status, *_, reason = _run(site, "")["statuses"]["missing"]
    assert status == "framework not installed"
    assert "framework_that_is_not_installed" in reason


def test_the_first_view_of_a_plugin_type_uses_the_plugin(site):
    result = _run(site, """
        from fakeframework.arrays import Array
        from interop_core import plugins
        a = Array(5)
        v = interop_core.view(a)
        result["view"] = [v.ptr == a.address, list(v.shape), v.owner is a,
                          plugins.reader_for(Array).plugin]
        result["exported"] = interop_core.to(a, "fakeframework").ptr == a.address
    """)
    assert result["view"] == [True, [5], True, "good"]
    assert result["exported"] is True


def test_autoload_can_be_disabled(site):
    result = _run(site, "", INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD="1")
    assert "good" not in result["statuses"] and result["warnings"] == []
