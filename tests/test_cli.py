"""``python -m interop_core``: the demo, ``plugins`` and ``doctor``, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cuda_probe import cuda_device_count

from interop_core.cuda import _cuda

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("torch", "cupy", "jax", "jaxlib", "numba", "numpy", "ml_dtypes", "cuda.core",
              "tensorflow")

# A distribution installed into a temporary directory: three plugins through real entry points.
# One loads (its claimed type lives in an importable module), one claims a framework that is not
# installed, one fails to import.
PLUGIN_MODULES = {
    "interop_fake_good.py": """
        import interop_core

        class Tensor:
            pass

        @interop_core.hookimpl
        def interop_core_register(registry):
            registry.add_type("interop_fake_good:Tensor", reader="buffer_protocol")
            registry.add_type("interop_fake_good:Other", reader="array_interface")
    """,
    "interop_fake_absent.py": """
        import interop_core

        @interop_core.hookimpl
        def interop_core_register(registry):
            registry.add_type("no_such_framework_xyz.core:Array", reader="dlpack")
    """,
    "interop_fake_broken.py": """
        raise ImportError("this plugin is broken on purpose")
    """,
}
ENTRY_POINTS = """
[interop_core.plugins]
fake_good = interop_fake_good
fake_absent = interop_fake_absent
fake_broken = interop_fake_broken
"""


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    for name, source in PLUGIN_MODULES.items():
        (site / name).write_text(textwrap.dedent(source))
    info = site / "interop_fake_plugins-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: interop-fake-plugins\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def _run(*args: str, site: Path | None = None, env: dict | None = None,
         code: str | None = None) -> str:
    # This tree's first-party plugins, as the test process imports them (the installed entry
    # points name their modules).
    paths = [str(ROOT), str(ROOT / "plugins")] + ([str(site)] if site else [])
    full_env = {key: value for key, value in os.environ.items()
                if key != "INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD"}
    full_env.update({"PYTHONPATH": os.pathsep.join(paths), **(env or {})})
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "interop_core"]
    out = subprocess.run([*command, *args], capture_output=True, text=True, env=full_env,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


# -- plugins ----------------------------------------------------------------------------------


def test_plugins_json_reports_each_plugin_from_real_entry_points(plugin_site):
    rows = {row["name"]: row for row in json.loads(_run("plugins", "--json", site=plugin_site))}
    assert {"fake_good", "fake_absent", "fake_broken"} <= set(rows)
    good, absent, broken = rows["fake_good"], rows["fake_absent"], rows["fake_broken"]
    for row in (good, absent, broken):
        assert (row["distribution"], row["version"]) == ("interop-fake-plugins", "1.2.3")
        assert set(row) == {"name", "distribution", "version", "claims", "exporters", "status",
                            "reason"}
    assert good["status"] == "loaded" and good["reason"] is None
    assert good["claims"] == ["interop_fake_good:Tensor", "interop_fake_good:Other"]
    assert absent["status"] == "framework not installed"
    assert absent["claims"] == ["no_such_framework_xyz.core:Array"]
    assert absent["reason"] == "no_such_framework_xyz"     # the status says "not installed"
    assert broken["status"] == "failed"
    assert "this plugin is broken on purpose" in broken["reason"]


def test_plugins_table_has_a_row_per_plugin(plugin_site):
    lines = _run("plugins", site=plugin_site).splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "TYPES"]
    rows = {line.split()[0]: line for line in lines[1:]}
    good = rows["fake_good"].split(maxsplit=3)
    assert good[:3] == ["fake_good", "interop-fake-plugins", "1.2.3"]
    assert good[3].startswith("loaded")
    assert "interop_fake_good:Tensor, interop_fake_good:Other" in rows["fake_good"]
    assert "framework not installed: no_such_framework_xyz" in rows["fake_absent"]
    assert rows["fake_absent"].count("not installed") == 1, rows["fake_absent"]
    assert "no_such_framework_xyz.core:Array" in rows["fake_absent"]
    assert "failed: " in rows["fake_broken"]
    assert "broken on purpose" in rows["fake_broken"]


def test_plugins_respects_disabled_autoload(plugin_site):
    env = {"INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    assert "fake_good" not in {r["name"] for r in
                               json.loads(_run("plugins", "--json", site=plugin_site, env=env))}
    out = _run("plugins", site=plugin_site, env=env)
    assert "plugin discovery is off" in out
    assert "fake_good" not in out


# -- doctor -----------------------------------------------------------------------------------


def _installed_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@pytest.mark.parametrize("name, dist", [("numpy", "numpy"), ("torch", "torch"), ("jax", "jax"),
                                        ("ml_dtypes", "ml_dtypes"), ("cuda.core", "cuda-core"),
                                        ("numba", "numba"), ("cupy", "cupy")])
def test_doctor_lists_each_framework_with_its_version(name, dist):
    lines = _run("doctor").splitlines()
    line = next(line for line in lines if line.split()[:1] == [name])
    expected = _installed_version(dist)
    if expected is None and dist == "cupy":
        expected = next((v for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")
                         if (v := _installed_version(d))), None)
    assert line.split()[1:] == ([expected] if expected else ["not", "installed"])


def test_doctor_reports_python_interop_core_cuda_and_plugins(plugin_site):
    import interop_core

    out = _run("doctor", site=plugin_site)
    assert f"Python        {sys.version.split()[0]}" in out
    # The package under test: this tree's, or an installed wheel's (CI tests both).
    assert (f"interop-core  {interop_core.__version__} "
            f"({Path(interop_core.__file__).parent})") in out
    assert "\nCUDA\n" in out
    if cuda_device_count() == 0:
        assert "driver      not found" in out
    else:
        assert f"devices     {cuda_device_count()}" in out
    assert "\nPlugins\n" in out
    assert "failed: fake_broken: " in out
    # The summary counts every plugin of this environment (first-party ones too).
    statuses = [p["status"] for p in json.loads(_run("plugins", "--json", site=plugin_site))]
    for status in ("failed", "framework not installed", "loaded"):
        if statuses.count(status):
            assert f"{statuses.count(status)} {status}" in out


def test_doctor_json_matches_the_driver_binding(plugin_site):
    report = json.loads(_run("doctor", "--json", site=plugin_site))
    assert report["python"]["version"] == sys.version.split()[0]
    assert report["cuda"]["driver_version"] == _cuda.driver_version()
    assert len(report["cuda"]["devices"]) == _cuda.device_count() == cuda_device_count()
    assert [d["name"] for d in report["cuda"]["devices"]] == [
        _cuda.device_name(i) for i in range(_cuda.device_count())]
    names = {row["name"] for row in report["frameworks"]}
    assert {"torch", "cupy", "jax", "numba", "numpy", "ml_dtypes", "cuda.core"} <= names
    assert all("import" not in row for row in report["frameworks"])
    statuses = report["plugins"]["by_status"]
    assert statuses.get("failed", 0) >= 1 and statuses.get("loaded", 0) >= 1


PROBE = """
import json, sys
from interop_core.__main__ import main
main(sys.argv[1:])
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def _modules_after(*args: str, site: Path | None = None) -> set[str]:
    out = _run(*args, code=PROBE, site=site)
    line = next(line for line in out.splitlines() if line.startswith("MODULES="))
    return set(json.loads(line[len("MODULES="):]))


@pytest.mark.parametrize("args", [("doctor",), ("doctor", "--json"), ("plugins",)])
def test_doctor_and_plugins_import_no_framework(args, plugin_site):
    imported = sorted(name for name in FRAMEWORKS if name in _modules_after(*args,
                                                                            site=plugin_site))
    assert imported == [], f"{' '.join(args)} imported {imported}"
    assert "cuda" not in _modules_after(*args)   # cuda.core is located without importing cuda


def test_doctor_import_imports_installed_frameworks(doctor_import):
    pytest.importorskip("numpy")
    assert "numpy" in doctor_import["modules"]
    report = doctor_import["json"]
    numpy_row = next(row for row in report["frameworks"] if row["name"] == "numpy")
    assert numpy_row["import"] == "ok"
    import numpy

    assert numpy_row["module_version"] == numpy.__version__


def test_doctor_import_reports_each_fast_readers_validation(doctor_import):
    pytest.importorskip("numpy")
    report = doctor_import["json"]
    rows = {row["type"]: row for row in report["readers"]}
    assert rows["numpy:ndarray"]["validated"] is True
    assert rows["numpy:ndarray"]["plugin"] == "numpy"
    assert "canaries" in rows["numpy:ndarray"]["reason"]
    text = doctor_import["text"]
    assert "numpy:ndarray" in text and "validated" in text


def test_doctor_import_reports_the_jax_sharded_paths_validation_beside_its_readers(
        doctor_import):
    jax = pytest.importorskip("jax")
    report = doctor_import["json"]
    t = type(jax.numpy.zeros(1))
    rows = {(row["type"], row["kind"]): row for row in report["readers"]}
    path = f"{t.__module__}:{t.__qualname__}"
    assert rows[(path, "reader")]["validated"] and rows[(path, "shards")]["validated"]
    assert rows[(path, "shards")]["details"]["arrays_checked"] >= 12
    assert f"{path} (shards)" in doctor_import["text"]


def test_doctor_reports_a_reader_that_fell_back_and_why():
    pytest.importorskip("numpy")
    code = ("import numpy, sys; from interop_core.registry import _validation; "
            "_validation._force('numpy:ndarray', False, 'pinned by the test'); "
            "from interop_core.__main__ import main; sys.exit(main(['doctor', '--import']))")
    out = _run(code=code)
    assert "numpy:ndarray" in out and "FELL BACK: pinned by the test" in out


# -- the demo stays the default ---------------------------------------------------------------


def test_no_subcommand_runs_the_demo():
    out = _run()
    assert out.startswith("interop-core ")
    assert "numpy" in out


def test_unknown_subcommand_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "interop_core", "nope"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr


# -- the driver binding behind doctor ---------------------------------------------------------


def test_device_count_agrees_with_the_driver():
    assert _cuda.device_count() == cuda_device_count()


@pytest.mark.parametrize("ordinal", [-1, 10_000])
def test_device_name_of_a_missing_device_is_none(ordinal):
    assert _cuda.device_name(ordinal) is None


@pytest.mark.parametrize("bad", [1.0, "0", None, True])
def test_device_name_rejects_non_ints(bad):
    with pytest.raises(TypeError, match="ordinal must be an int"):
        _cuda.device_name(bad)


@pytest.mark.gpu
def test_every_device_has_a_name():
    names = [_cuda.device_name(i) for i in range(_cuda.device_count())]
    assert names and all(isinstance(n, str) and n for n in names)


# -- version and reference --------------------------------------------------------------------


def test_version_option_prints_the_package_version():
    import interop_core

    assert _run("--version").strip() == f"interop-core {interop_core.__version__}"


def test_the_distribution_version_is_read_from_the_package():
    # One place holds the version: pyproject.toml declares it dynamic, read from
    # interop_core.__version__ by the build backend.
    config = pytest.importorskip("setuptools.config.pyprojecttoml")
    import interop_core

    assert config.read_configuration(ROOT / "pyproject.toml")["project"]["version"] == (
        interop_core.__version__)
    project_table = (ROOT / "pyproject.toml").read_text().split("[project.")[0]
    assert 'version = "' not in project_table, "the version is written in pyproject.toml too"


def test_the_cli_reference_in_the_docs_is_what_the_parser_prints():
    from interop_core.__main__ import reference_markdown

    page = (ROOT / "docs" / "cli.md").read_text()
    block = page.split("<!-- cli-reference:start -->\n")[1].split("<!-- cli-reference:end -->")[0]
    assert block == reference_markdown(), "run: python docs/cli_reference.py"


def test_the_cli_reference_lists_every_bench_section():
    from interop_core.__main__ import reference_markdown
    from interop_core.bench import SECTIONS

    text = reference_markdown()
    listed = [line.split("`")[1] for line in text.splitlines() if line.startswith("| `")]
    assert listed == list(SECTIONS)
    assert "{" + ",".join(SECTIONS) + "}" in text       # the --section choices of bench --help
