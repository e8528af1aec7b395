"""The benchmark suite (``python -m interop_core bench``) runs end to end and reports honestly.

Smoke runs only (``--quick``): no timing assertions, just that every section produces results,
that failures are recorded rather than raised, and that the outputs are well formed.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from interop_core.bench import SECTIONS, summary
from interop_core.bench._cases import Case, run_case, run_group
from interop_core.bench._harness import (
    FAILED,
    NOT_APPLICABLE,
    OK,
    QUICK,
    Measurement,
    bound,
    measure_threads,
    sample_interleaved,
)
from interop_core.bench._report import (
    BUDGET,
    FRACTION_BUDGETS,
    budget_rows,
    budget_text,
    format_budget,
    format_markdown,
    format_section,
    headline_rows,
    machine_label,
    section_rows,
    within_budget,
)

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict:
    paths = [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick CPU run of the whole suite through the command line."""
    pytest.importorskip("numpy")
    out = tmp_path_factory.mktemp("bench")
    result = subprocess.run(
        [sys.executable, "-m", "interop_core", "bench", "--quick", "--device", "cpu",
         "--json", str(out / "r.json"), "--markdown", str(out / "r.md")],
        capture_output=True, text=True, timeout=240, env=_env())
    assert result.returncode == 0, result.stderr[-2000:]
    return result, json.loads((out / "r.json").read_text()), (out / "r.md").read_text()


def test_quick_run_prints_the_budget_and_a_table_per_section(quick_run):
    result, data, page = quick_run
    assert "## DESIGN.md budget" in result.stdout
    assert result.stdout.strip() == page.strip()
    sections = {r["section"] for r in data["results"]}
    # Every section that has something to measure on a CPU machine (stream needs a GPU; launch
    # measures torch arguments; to needs a framework beside numpy that takes host memory).
    expected = {"view", "readers", "to", "viewable", "launch", "ndim", "threads", "dispatch",
                "copies", "import"}
    installed = {name for name in ("torch", "jax")
                 if __import__("importlib").util.find_spec(name) is not None}
    if "torch" not in installed:
        expected.discard("launch")
    if not installed:
        expected.discard("to")
    assert sections >= expected
    if __import__("importlib").util.find_spec("jax") is not None:
        measured = {r["group"] for r in data["results"] if r["section"] == "shards" and r["ns"]}
        assert {"shards(jax over 2 cpu devices)", "shards(jax over 8 cpu devices)",
                "assemble(jax over 2 cpu devices)", "assemble(jax over 8 cpu devices)"} <= measured
    assert "stream" not in sections, "CUDA stream cases must not run with --device cpu"


def test_quick_run_reports_progress_on_stderr_not_stdout(quick_run):
    result, data, _ = quick_run
    assert f"/{len(data['results'])}]" in result.stderr
    assert "[   1/" not in result.stdout


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_quick_run_measures_our_view_of_each_installed_framework(quick_run, framework):
    pytest.importorskip(framework)
    _, data, _ = quick_run
    ours = [r for r in data["results"]
            if r["group"] == f"view({framework} cpu)" and r["name"] == "interop_core view()"]
    assert len(ours) == 1 and ours[0]["ns"] > 0 and ours[0]["ours"]


def test_quick_run_puts_an_installed_peer_beside_ours(quick_run):
    pytest.importorskip("cuda.core")
    _, data, _ = quick_run
    names = {r["name"] for r in data["results"] if r["group"] == "view(numpy cpu)"}
    assert "cuda.core from_dlpack" in names


def test_quick_run_covers_viewable_ndim_and_threads(quick_run):
    pytest.importorskip("torch")
    _, data, _ = quick_run
    groups = {r["group"] for r in data["results"]}
    for n in (1, 4, 16):
        assert f"launch({n} × torch cpu)" in groups
    assert {"ndim= 1 torch cpu", "ndim=64 torch cpu"} <= groups
    threads = [r for r in data["results"] if r["section"] == "threads" and r["ns"]]
    assert {r["extra"]["threads"] for r in threads} == {1, 2, 4, 8}


def test_quick_run_times_host_copies_beside_numpys(quick_run):
    _, data, _ = quick_run
    copies = [r for r in data["results"] if r["section"] == "copies"]
    groups = {r["group"] for r in copies}
    assert {"copy host contiguous 16 MiB", "copy host transpose 1024x1024 float32"} <= groups
    for group in groups:
        names = {r["name"]: r["ns"] for r in copies if r["group"] == group}
        assert names["interop_core copy_from"] > 0 and names["numpy copyto"] > 0, group


def test_device_copy_groups_time_every_path_once_in_device_time():
    from interop_core.bench._cases import _DeviceTimedGroup

    class FakeEvent:
        clock = [0.0]

        def __init__(self, enable_timing):
            self.at = None

        def record(self, stream):
            self.at = FakeEvent.clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.at - self.at

    class FakeTorch:
        class cuda:
            Event = FakeEvent

    class FakeStream:
        def synchronize(self):
            pass

    def path(ms):
        def enqueue():
            FakeEvent.clock[0] += ms    # what the device would spend on one copy
        return enqueue

    group = _DeviceTimedGroup(FakeTorch, FakeStream(), {"ours": path(0.5), "peer": path(2.0)})
    ours, note, extra = group.runner("ours")(QUICK)
    peer, _, peer_extra = group.runner("peer")(QUICK)
    assert ours == pytest.approx(0.5e6) and peer == pytest.approx(2.0e6)
    assert "device time" in note and len(extra["rounds"]) == len(peer_extra["rounds"])


def test_quick_run_records_environment_and_import_without_frameworks(quick_run):
    _, data, _ = quick_run
    env = data["environment"]
    assert env["python"] and env["versions"]["interop_core"]
    (imp,) = [r for r in data["results"] if r["section"] == "import"]
    assert imp["extra"]["imported"] == [], imp["note"]


def _plot_results() -> list[Measurement]:
    return [Measurement("view", "view(numpy cpu)", "interop_core view()", 120.0, True),
            Measurement("view", "view(numpy cpu)", "cuda.core from_dlpack", 900.0),
            Measurement("view", "view(numpy cpu)", "broken peer", None, note="TypeError"),
            Measurement("view", "view(torch cpu)", "torch __cuda_array_interface__ (dict only)",
                        None, note="host memory", status=NOT_APPLICABLE),
            Measurement("dispatch", "dispatch numpy cpu", "interop_core view()", 70.0, True),
            Measurement("import", "import interop_core", "interop_core (fresh interpreter)",
                        15e6, True)]


def test_plot_writes_the_headline_and_a_chart_per_section(tmp_path):
    pytest.importorskip("matplotlib")
    from interop_core.bench._report import plot

    written = plot(_plot_results(), str(tmp_path / "c.png"), "t")
    # The import section is one number: it has a table, not a chart.
    assert written == {"headline": str(tmp_path / "c.png"), "view": str(tmp_path / "c-view.png"),
                       "dispatch": str(tmp_path / "c-dispatch.png")}
    for path in written.values():
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_fails_clearly_before_running(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; "
            "from interop_core.__main__ import main; "
            f"sys.exit(main(['bench', '--quick', '--plot', {str(tmp_path / 'c.png')!r}]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=_env())
    assert result.returncode == 2
    assert "needs matplotlib" in result.stderr and "pip install matplotlib" in result.stderr
    assert not (tmp_path / "c.png").exists()


def test_a_failing_path_is_recorded_as_a_result_not_raised():
    def boom():
        raise BufferError("cannot export")

    m = run_case(Case("view", "view(x cpu)", "peer", boom), QUICK)
    assert m.ns is None and m.note == "BufferError: cannot export"


def test_the_paths_of_an_operation_are_timed_in_turn():
    calls = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    rounds = sample_interleaved(fns, QUICK)
    assert len(rounds) == 2 and all(len(r) == QUICK.repeats and min(r) > 0 for r in rounds)
    timed = calls[2 * QUICK.warmup:]             # after each path's own warm-up
    switches = sum(x != y for x, y in zip(timed, timed[1:], strict=False))
    assert switches >= 2 * QUICK.repeats - 1    # one batch of each per round, not a run of one


def test_a_failing_path_does_not_stop_the_others_of_its_operation():
    def boom():
        raise BufferError("cannot export")

    cases = [Case("view", "view(x cpu)", "ours", lambda: None, ours=True),
             Case("view", "view(x cpu)", "broken peer", boom),
             Case("view", "view(x cpu)", "peer", lambda: 1)]
    ours, broken, peer = run_group(cases, QUICK)
    assert (ours.name, broken.name, peer.name) == ("ours", "broken peer", "peer")
    assert ours.ns > 0 and peer.ns > 0 and ours.ours
    assert broken.ns is None and broken.note == "BufferError: cannot export"


def test_section_table_gives_ratios_to_the_first_of_ours():
    rows = [Measurement("view", "g", "interop_core view()", 100.0, True),
            Measurement("view", "g", "interop_core other", 150.0, True),
            Measurement("view", "g", "peer", 700.0),
            Measurement("view", "g", "peer2", None, note="ValueError: x | y")]
    table = format_section(rows).splitlines()
    assert table[2].split("|")[4].strip() == "1.00"
    assert table[3].split("|")[4].strip() == "1.50"
    assert table[4].split("|")[4].strip() == "7.00"
    assert "failed" in table[5] and "x \\| y" in table[5]


def test_section_table_gives_the_ratio_round_by_round_where_paths_were_interleaved():
    # Rounds of one machine spell move every path of the operation alike: the per-round ratio
    # (median and quartiles) sees through them where the ratio of medians may not.
    rows = [Measurement("from", "g", "interop_core view()", 100.0, True,
                        extra={"rounds": [100.0, 200.0, 100.0, 200.0, 100.0]}),
            Measurement("from", "g", "interop_core from_dlpack", 120.0, True,
                        extra={"rounds": [110.0, 220.0, 110.0, 220.0, 110.0]}),
            Measurement("from", "g", "peer, timed alone", 300.0)]
    table = format_section(rows).splitlines()
    assert table[0].split("|")[5].strip() == "× ours, per round"
    assert table[2].split("|")[5].strip() == ""             # the reference itself
    assert table[3].split("|")[4].strip() == "1.20"         # of the medians
    assert table[3].split("|")[5].strip() == "1.10 (1.10–1.10)"
    assert table[4].split("|")[5].strip() == ""             # no rounds to pair


@pytest.mark.parametrize("groups, expected", [
    (["view(jax cpu)"], "view(jax cpu)"),
    (["view(jax cpu)", "view(jax cuda)"], "view(jax cuda)"),
])
def test_budget_prefers_the_gpu_measurement_of_a_line(groups, expected):
    results = [Measurement("view", g, "interop_core view()", 1000.0, True) for g in groups]
    (row,) = [r for r in budget_rows(results) if r["line"] == "view(jax array)"]
    assert row["group"] == expected and row["ours_ns"] == 1000.0


def test_budget_table_has_every_design_line_and_says_what_was_not_measured():
    results = [Measurement("view", "view(numpy cpu)", "interop_core view()", 80.0, True),
               Measurement("view", "view(numpy cpu)", "cuda.core from_dlpack", 800.0)]
    table = format_budget(results)
    assert len(table.splitlines()) == 2 + len(BUDGET) + len(FRACTION_BUDGETS)
    numpy_row = next(line for line in table.splitlines() if line.startswith("| view(numpy"))
    assert "| 80.0 |" in numpy_row and "cuda.core from_dlpack: 800" in numpy_row
    assert numpy_row.endswith("| yes |")
    assert "| view(cupy array) | not measured here |" in table


def _same_stream_row(ours_rounds, reference_rounds, ours_ns=100.0, reference_ns=100.0):
    group = "view(torch cuda, same stream)"
    results = [Measurement("stream", group, "interop_core view(stream=-1)", reference_ns, True,
                           extra={"rounds": reference_rounds}),
               Measurement("stream", group, "interop_core view(stream=int handle)", ours_ns,
                           True, extra={"rounds": ours_rounds})]
    (row,) = [r for r in budget_rows(results) if r["line"].startswith("same-stream")]
    return row


@pytest.mark.parametrize("ours, reference, kept", [
    # The machine slowed down mid-run: both paths slowed together; ours is never slower.
    ([100, 101, 150, 151, 100], [101, 102, 151, 152, 101], True),
    # Equal costs, noise either way: not measurably slower.
    ([100, 103, 99, 102, 101], [101, 100, 102, 100, 101], True),
    # Slower in every round, however little.
    ([104, 105, 104, 106, 105], [100, 101, 100, 102, 101], False),
])
def test_a_relative_budget_compares_the_two_paths_round_by_round(ours, reference, kept):
    row = _same_stream_row(ours, reference)
    assert row["paired_ratio"] is not None
    assert within_budget(row) is kept


def test_a_relative_budget_without_rounds_compares_medians():
    row = _same_stream_row([], [], ours_ns=99.0, reference_ns=100.0)
    assert row["paired_ratio"] is None and within_budget(row)
    row = _same_stream_row([], [], ours_ns=101.0, reference_ns=100.0)
    assert not within_budget(row)


def _per_shard_row(ours_rounds):
    group = "shards(jax over 8 cpu devices)"
    results = [Measurement("shards", group, "interop_core shards(), per shard",
                           sorted(ours_rounds)[2], True, extra={"rounds": ours_rounds}),
               Measurement("shards", group,
                           "interop_core view(), one single-device array of a shard's shape "
                           "per device, per view", 100.0, True, extra={"rounds": [100.0] * 5})]
    (row,) = [r for r in budget_rows(results)
              if r["line"] == "shards(jax array), per shard, 8 devices"]
    return row


@pytest.mark.parametrize("ours, kept", [([115, 118, 119, 116, 117], True),
                                        ([125, 126, 127, 125, 128], False)])
def test_a_budget_of_a_factor_scales_the_reference_path(ours, kept):
    row = _per_shard_row(ours)
    assert row["budget_ns"] == pytest.approx(120.0)
@pytest.mark.parametrize("ours, fastest, kept", [
    ([90, 91, 92, 90, 91], [100, 101, 100, 102, 101], True),     # faster than the best import
    ([120, 121, 122, 120, 121], [100, 101, 100, 102, 101], False),
])
def test_every_to_pair_gets_a_budget_line_against_the_fastest_target_import(ours, fastest, kept):
    group = "to(jax cpu, 'numpy')"
    results = [Measurement("to", group, "interop_core to()", statistics.median(ours), True,
                           extra={"rounds": ours}),
               Measurement("to", group, "np.from_dlpack", 5000.0,
                           extra={"rounds": [5000.0] * 5}),
               Measurement("to", group, "np.asarray", statistics.median(fastest),
                           extra={"rounds": fastest}),
               Measurement("to", group, "torch.from_dlpack", 10.0)]   # not numpy's own import
    (row,) = [r for r in budget_rows(results) if r["group"] == group]
    assert row["budget_path"] == "np.asarray"
    assert [p["name"] for p in row["peers"]] == ["np.from_dlpack", "np.asarray"]
    assert within_budget(row) is kept


@pytest.mark.parametrize("ours_ns, kept", [(100.0, True), (None, False)])
def test_a_pair_the_target_cannot_import_is_kept_when_ours_works(ours_ns, kept):
    group = "to(numba cuda, 'jax')"
    results = [Measurement("to", group, "interop_core to()", ours_ns, True),
               Measurement("to", group, "jax.dlpack.from_dlpack", None, note="TypeError: x")]
    (row,) = [r for r in budget_rows(results) if r["group"] == group]
    assert row["budget_ns"] is None and within_budget(row) is kept
    assert "cannot take this source" in budget_text(row)


@pytest.mark.parametrize("ours, reference, kept", [
    ([40, 41, 40, 42, 41], [100, 101, 100, 102, 101], True),
    ([60, 61, 60, 62, 61], [100, 101, 100, 102, 101], False),   # faster, but not 2x faster
])
def test_a_fraction_budget_scales_the_reference(ours, reference, kept):
    results = [Measurement("view", "view(jax cpu)", "interop_core view()",
                           statistics.median(ours), True, extra={"rounds": ours}),
               Measurement("view", "view(jax cpu)", "jax __dlpack__ (capsule only)",
                           statistics.median(reference), extra={"rounds": reference})]
    (row,) = [r for r in budget_rows(results) if r["line"].startswith("view(jax array) ≤ 0.5")]
    assert row["budget_ns"] == statistics.median(reference) / 2
    assert within_budget(row) is kept


def test_threads_harness_counts_calls_from_every_thread():
    calls = []
    ns, per_s = measure_threads(lambda: calls.append(1), threads=3, seconds=0.01, chunk=10)
    assert ns > 0 and per_s > 0 and len(calls) >= 3 * 20


def test_sections_are_the_documented_ones():
    assert list(SECTIONS) == ["view", "from", "readers", "stream", "to", "viewable", "launch",
                              "ndim", "threads", "dispatch", "shards", "copies", "import"]


def test_bound_calls_pass_positional_and_keyword_arguments_as_given():
    def record(*args, **kwargs):
        return args, kwargs

    assert bound(record, 1, "x")() == ((1, "x"), {})
    marker = object()
    assert bound(record, marker, stream=-1, copy=None)() == ((marker,), {"stream": -1,
                                                                         "copy": None})


def test_quick_run_measures_the_launch_path_beside_its_peers(quick_run):
    pytest.importorskip("torch")
    _, data, page = quick_run
    by_group = {}
    for r in data["results"]:
        if r["section"] == "launch":
            by_group.setdefault(r["group"], {})[r["name"]] = r
    for n in (1, 4, 16):
        paths = by_group[f"launch({n} × torch cpu)"]
        for name in ("interop_core launch_args (key + pointers)", "view() loop, no key",
                     "interop_core @viewable (view mode)", "view() loop + tuple key + pointers",
                     "Helion's fast key (torch API)"):
            assert paths[name]["ns"] > 0, name
    (per_arg,) = by_group["launch: per extra torch argument (cpu)"].values()
    assert per_arg["ns"] is not None and per_arg["ours"]
    assert by_group["view accessors (torch cpu)"]["view.shape"]["ns"] > 0
    assert "| launch_args, 16 torch args, key + pointers | launch(16 × torch cpu) |" in page


def test_a_relative_budget_may_scale_the_reference_and_add_ns():
    group = "launch(16 × torch cuda)"
    results = [Measurement("launch", group, "view() loop, no key", 1000.0, True,
                           extra={"rounds": [1000.0, 1000.0, 1000.0, 1000.0]}),
               Measurement("launch", group, "interop_core launch_args (key + pointers)", 1150.0,
                           True, extra={"rounds": [1150.0, 1190.0, 1150.0, 1100.0]})]
    (row,) = [r for r in budget_rows(results) if r["line"].startswith("launch_args, 16")]
    assert row["budget_ns"] == 1200.0 and within_budget(row)
    assert "1.2 × view() loop, no key" in format_budget(results)


def test_the_jax_first_reads_script_runs_and_reports_both_sides():
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jax_first_reads.py"),
                          "--arrays", "32", "--rounds", "2"], capture_output=True, text=True,
                         check=True, env=_env(), timeout=300).stdout
    assert "to(x, 'numpy')" in out and "np.asarray" in out and "ours / np.asarray" in out


def test_the_static_constructor_script_times_both_forms_and_leaves_the_class_as_built():
    script = ROOT / "benchmarks" / "static_constructor_lookup.py"
    code = ("import runpy, sys; sys.argv = ['s', '--rounds', '2', '--calls', '200']; "
            f"runpy.run_path({str(script)!r}, run_name='__main__'); "
            "from interop_core import StridedMemoryView as S; "
            "print('WRAPPED' if isinstance(S.__dict__['from_dlpack'], staticmethod) else 'PLAIN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env(), timeout=300).stdout
    rows = [line for line in out.splitlines() if line.startswith("| numpy |")]
    assert [row.split("|")[2].strip() for row in rows] == ["from_dlpack", "from_any"]
    assert out.splitlines()[-1] == "PLAIN"     # the class as built once the script is done


def _readers_before_after(*args: str) -> subprocess.CompletedProcess:
    cpu = str(min(os.sched_getaffinity(0)))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "readers_before_after.py"),
                           *args, "--cpu", cpu, "--blocks", "4", "--processes", "1",
                           "--objects", "numpy"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)


def test_the_readers_before_after_script_times_a_tree_against_itself():
    out = _readers_before_after("--control")
    assert out.returncode == 0, out.stderr
    assert "this tree against itself" in out.stdout
    assert "| numpy |" in out.stdout


def test_the_readers_before_after_script_names_a_tree_it_cannot_import(tmp_path):
    # The failure once met on a reused machine: the older tree's Python files were gone, and
    # the script printed an empty table as if there was nothing to compare.
    (tmp_path / "interop_core").mkdir()
    (tmp_path / "interop_core" / "__init__.py").write_text(
        "raise ImportError('this tree is deliberately broken')\n")
    out = _readers_before_after(str(tmp_path))
    assert out.returncode == 1
    assert str(tmp_path) in out.stderr
    assert "this tree is deliberately broken" in out.stderr
    assert "| numpy |" not in out.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None
                    or shutil.which("nm") is None or shutil.which("objdump") is None,
                    reason="needs Linux, cc, nm and objdump")
def test_the_view_profiler_names_the_functions_of_a_view_call(tmp_path):
    annotated = tmp_path / "annotated.txt"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_view.py"),
                          "--seconds", "0.5", "--annotate", str(annotated)],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ns per view unsampled" in out.stdout
    # The registry's dispatch and numpy's reader take part in every view(numpy) call.
    assert "_registry" in out.stdout and "read_ndarray" in out.stdout
    text = annotated.read_text()
    assert text.startswith("== ") and "samples" in text


# -- paths that cannot run here, and the closing count ----------------------------------------


def test_quick_run_reports_cuda_only_peer_paths_of_host_objects_as_not_applicable(quick_run):
    result, data, page = quick_run
    cai = [r for r in data["results"] if r["name"].endswith("__cuda_array_interface__ (dict only)")]
    for framework in ("torch", "jax"):
        if __import__("importlib").util.find_spec(framework) is not None:
            assert any(r["group"] == f"view({framework} cpu)" for r in cai), framework
    for r in cai:
        assert (r["status"], r["ns"]) == (NOT_APPLICABLE, None), r
        assert "host memory" in r["note"]
    assert all(r["status"] in (OK, FAILED, NOT_APPLICABLE) for r in data["results"])
    assert all((r["status"] == OK) == (r["ns"] is not None) for r in data["results"])
    counts = {s: sum(r["status"] == s for r in data["results"]) for s in (OK, NOT_APPLICABLE,
                                                                          FAILED)}
    closing = next(line for line in result.stderr.splitlines() if line.startswith("bench: "))
    assert (f"{len(data['results'])} paths in " in closing
            and f": {counts[OK]} timed, {counts[NOT_APPLICABLE]} not applicable, "
                f"{counts[FAILED]} failed" in closing), closing
    assert "| not applicable |" in page


def test_a_path_marked_not_applicable_is_reported_without_being_called():
    def must_not_run():
        raise AssertionError("called")

    cases = [Case("view", "view(x cpu)", "ours", lambda: None, ours=True),
             Case("view", "view(x cpu)", "cuda-only peer", must_not_run,
                  not_applicable="host memory: no CUDA interface")]
    ours, peer = run_group(cases, QUICK)
    assert ours.status == OK and ours.ns > 0
    assert (peer.status, peer.ns, peer.note) == (NOT_APPLICABLE, None,
                                                 "host memory: no CUDA interface")
    assert run_case(cases[1], QUICK).status == NOT_APPLICABLE


def test_a_failure_and_a_path_that_does_not_apply_are_told_apart():
    rows = [Measurement("view", "g", "interop_core view()", 100.0, True),
            Measurement("view", "g", "broken", None, note="TypeError: x"),
            Measurement("view", "g", "cuda-only", None, note="host memory",
                        status=NOT_APPLICABLE)]
    table = format_section(rows).splitlines()
    assert "| failed |" in table[3] and "| not applicable |" in table[4]
    text = summary(rows, 3.0)
    assert text.splitlines() == ["3 paths in 3 s: 1 timed, 1 not applicable, 1 failed",
                                 "  not applicable: g: cuda-only: host memory",
                                 "  failed: g: broken: TypeError: x"]


def test_results_recorded_without_a_status_load_as_timed_or_failed():
    timed = Measurement(**{"section": "view", "group": "g", "name": "n", "ns": 5.0})
    failed = Measurement(**{"section": "view", "group": "g", "name": "n", "ns": None,
                            "note": "TypeError: x"})
    assert (timed.status, failed.status) == (OK, FAILED)
    assert Measurement(**failed.as_dict()) == failed


@pytest.mark.parametrize("ns, status", [(None, OK), (5.0, FAILED), (5.0, NOT_APPLICABLE),
                                        (None, "skipped")])
def test_a_measurement_refuses_a_status_that_contradicts_its_time(ns, status):
    with pytest.raises(ValueError, match="status"):
        Measurement("view", "g", "n", ns, status=status)


# -- the headline figure's and the section charts' data ---------------------------------------


def _rounds(ns: float) -> dict:
    return {"rounds": [ns] * 5}


def test_headline_divides_ours_by_the_fastest_other_library_and_scales_the_budget():
    group = "view(numpy cpu)"
    results = [Measurement("view", group, "interop_core view()", 50.0, True),
               Measurement("view", group, "cuda.core from_dlpack", 500.0),
               Measurement("view", group, "tvm_ffi.from_dlpack", 200.0),
               Measurement("view", group, "np.from_dlpack", None, note="TypeError: x")]
    (row,) = [r for r in headline_rows(results) if r["group"] == group]
    assert (row["peer"], row["peer_ns"]) == ("tvm_ffi.from_dlpack", 200.0)
    assert row["ratio"] == pytest.approx(0.25)
    assert row["budget"] == pytest.approx(100 / 200)      # 100 ns budget, as a ratio
    assert row["within"]


def test_headline_leaves_out_lines_measured_against_interop_core_alone():
    group = "view accessors (torch cpu)"
    results = [Measurement("launch", group, "bare attribute read (view.owner)", 30.0, True),
               Measurement("launch", group, "view.shape", 31.0, True)]
    assert [r for r in headline_rows(results) if r["group"] == group] == []


def test_headline_shows_an_operation_with_two_budget_lines_once_against_the_tighter():
    group = "copy transpose 4096x4096 float32"
    results = [Measurement("copies", group, "interop_core copy_from", 110.0, True,
                           extra=_rounds(110.0)),
               Measurement("copies", group, "torch Tensor.copy_", 100.0, extra=_rounds(100.0)),
               Measurement("copies", group, "cupy copyto", 120.0, extra=_rounds(120.0))]
    (row,) = [r for r in headline_rows(results) if r["group"] == group]
    assert row["label"] == "copy_to, transpose 4096×4096 float32"
    assert row["budget"] == pytest.approx(1.2) and row["ratio"] == pytest.approx(1.1)


def test_headline_sums_the_to_pairs_up_as_the_slowest_against_its_target():
    results = []
    for group, ours, theirs in (("to(torch cpu, 'numpy')", 100.0, 1000.0),
                                ("to(jax cpu, 'numpy')", 800.0, 1000.0)):
        results += [Measurement("to", group, "interop_core to()", ours, True,
                                extra=_rounds(ours)),
                    Measurement("to", group, "np.asarray", theirs, extra=_rounds(theirs))]
    (row,) = [r for r in headline_rows(results) if r["label"].startswith("every to() pair")]
    assert row["group"] == "to(jax cpu, 'numpy')" and row["ratio"] == pytest.approx(0.8)
    assert row["budget"] == 1.0 and row["within"]


def test_a_section_chart_compares_ours_with_the_fastest_peer_or_with_our_other_paths():
    results = [Measurement("view", "v", "interop_core view()", 50.0, True),
               Measurement("view", "v", "interop_core from_dlpack", 90.0, True),
               Measurement("view", "v", "slow peer", 900.0),
               Measurement("view", "v", "fast peer", 300.0),
               Measurement("view", "v", "na", None, note="x", status=NOT_APPLICABLE),
               Measurement("readers", "r", "plugin reader", 40.0, True),
               Measurement("readers", "r", "fallback", 400.0, True)]
    assert section_rows(results, "view") == [{"group": "v", "bars": [
        ("interop_core view()", 50.0, "ours"), ("fast peer", 300.0, "peer")]}]
    assert section_rows(results, "readers") == [{"group": "r", "bars": [
        ("plugin reader", 40.0, "ours"), ("fallback", 400.0, "alternative")]}]


@pytest.mark.parametrize("env, label", [
    ({"gpu": "NVIDIA H100 80GB HBM3, driver 13.0", "gpus": 1}, "NVIDIA H100 80GB HBM3"),
    ({"gpu": "NVIDIA H200, driver 13.0", "gpus": 2}, "2 × NVIDIA H200"),
    ({"gpu": None, "cpu": "AMD EPYC 7763 64-Core Processor", "cores": 2},
     "CPU machine (AMD EPYC 7763, 2 cores)"),
])
def test_a_results_page_names_its_machine(env, label):
    assert machine_label(env) == label


def test_a_results_page_carries_date_machine_and_charts():
    env = {"date": "2026-11-25", "cpu": "AMD EPYC", "cores": 2, "gpu": None, "gpus": 0,
           "python": "3.11.7", "platform": "Linux", "versions": {"interop_core": "0.1.0"}}
    page = format_markdown(_plot_results(), env, "python -m interop_core bench", "quick",
                           charts={"headline": "charts/x-headline.png", "view": "charts/x-view.png"},
                           remark="a loaded host")
    assert page.startswith("# Benchmark results: CPU machine (AMD EPYC, 2 cores)\n")
    assert "Measured 2026-11-25." in page and "numbers indicative only" in page
    assert "> a loaded host" in page
    assert page.index("(charts/x-headline.png)") < page.index("## DESIGN.md budget")
    assert page.index("(charts/x-view.png)") > page.index("## view() without")


def test_quick_run_records_the_date_and_the_gpu_count(quick_run):
    import datetime

    _, data, _ = quick_run
    env = data["environment"]
    assert datetime.date.fromisoformat(env["date"]) <= datetime.date.today()
    assert env["gpus"] == _cuda_device_count()


def _cuda_device_count() -> int:
    from interop_core.cuda import _cuda

    try:
        return _cuda.device_count()
    except Exception:
        return 0


# -- the recorded results ---------------------------------------------------------------------


def test_the_published_pages_are_what_the_recorded_results_give():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "publish.py"), "--check"],
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_recorded_results_are_one_page_per_machine_with_date_and_versions():
    results = ROOT / "benchmarks" / "results"
    assert sorted(p.name for p in results.glob("*.json")) == ["cpu.json", "gpu.json",
                                                              "gpu2.json"]
    assert sorted(p.name for p in results.glob("*.md")) == ["cpu.md", "gpu.md", "gpu2.md"]
    for path in results.glob("*.json"):
        env = json.loads(path.read_text())["environment"]
        assert env["date"] and env["versions"]["interop_core"] and env["python"], path.name
    assert json.loads((results / "gpu2.json").read_text())["environment"]["gpus"] == 2
