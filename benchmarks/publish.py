"""Publish the recorded benchmark runs: one results page per machine, its charts, and the
summary in docs/performance.md.

Usage::

    python benchmarks/publish.py            # pages, charts (needs matplotlib) and docs
    python benchmarks/publish.py --no-charts
    python benchmarks/publish.py --check    # exit 1 if a page or the docs differ from the JSON

For each machine whose run is recorded in ``benchmarks/results/NAME.json`` (``cpu``: the CPU
machine; ``gpu``: one H100; ``gpu2``: two GPUs), writes

- ``benchmarks/results/NAME.md``: machine, date, versions, the DESIGN.md budget table and a
  table per section, each under its chart;
- ``benchmarks/results/charts/NAME-headline.png``: per budget line, our time divided by the
  fastest other library's in the same run, with the budget drawn;
- ``benchmarks/results/charts/NAME-SECTION.png``: one chart per section;

and rewrites the blocks of ``docs/performance.md`` between the ``environments``,
``headline-figures`` and ``budget-table`` markers.  A JSON file is what
``python -m interop_core bench --json`` writes; an optional top-level ``"remark"`` (what a reader
must know about the run, e.g. a loaded host) is shown under the page's header.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("interop_core") is None:
    sys.path.insert(0, str(ROOT))           # this checkout, built in place, not installed

from interop_core.bench._harness import Measurement  # noqa: E402
from interop_core.bench._report import (  # noqa: E402
    SECTION_TITLES,
    _time,
    budget_rows,
    environment_line,
    format_markdown,
    machine_label,
    within_budget,
)

RESULTS = ROOT / "benchmarks" / "results"
CHARTS = RESULTS / "charts"
PAGE = ROOT / "docs" / "performance.md"
# (file stem, what the machine is called in the docs' tables).
MACHINES = (("cpu", "CPU machine"), ("gpu", "H100"), ("gpu2", "two GPUs"))
# The heading of docs/performance.md that includes each machine's page.
ANCHORS = {"cpu": "cpu-machine-every-path", "gpu": "h100-every-path",
           "gpu2": "two-gpus-sharded-arrays"}


class Run:
    """One recorded run: its JSON, results and what to call it."""

    def __init__(self, name: str, label: str, data: dict):
        self.name, self.label, self.data = name, label, data
        self.env = data["environment"]
        self.results = [Measurement(**r) for r in data["results"]]

    @property
    def title(self) -> str:
        version = self.env["versions"].get("interop_core", "?")
        date = self.env.get("date") or "date not recorded"
        return f"interop-core {version}, {machine_label(self.env)}, {date}"

    def chart(self, part: str) -> Path:
        return CHARTS / f"{self.name}-{part}.png"


def load_runs() -> list[Run]:
    """The recorded runs, in MACHINES order (a machine without a JSON file is left out)."""
    runs = []
    for name, label in MACHINES:
        path = RESULTS / f"{name}.json"
        if path.exists():
            runs.append(Run(name, label, json.loads(path.read_text())))
    return runs


def draw_charts(run: Run) -> None:
    """The run's headline figure and section charts; charts it no longer has are removed."""
    from interop_core.bench._report import plot_headline, plot_section

    CHARTS.mkdir(exist_ok=True)
    wanted = set()
    if plot_headline(run.results, str(run.chart("headline")),
                     f"{run.title}\ntime per call ÷ the fastest other library's"):
        wanted.add(run.chart("headline"))
    for section in dict.fromkeys(r.section for r in run.results):
        if section == "import":
            continue
        path = run.chart(section)
        if plot_section(run.results, section, str(path),
                        f"{run.title}\n{SECTION_TITLES.get(section, section)}"):
            wanted.add(path)
    for stale in set(CHARTS.glob(f"{run.name}-*.png")) - wanted:
        stale.unlink()


def results_page(run: Run) -> str:
    """The run's markdown page, linking the charts that exist."""
    charts = {}
    for part in ["headline", *dict.fromkeys(r.section for r in run.results)]:
        if run.chart(part).exists():
            charts[part] = run.chart(part).relative_to(RESULTS).as_posix()
    return format_markdown(run.results, run.env, run.data["command"], run.data["mode"],
                           charts=charts, remark=run.data.get("remark", ""))


def _rule(row: dict) -> str:
    """A budget as its rule: ns, or the path of the same run it is relative to."""
    if row["budget_path"] is None:
        return _time(row["budget_ns"])
    factor, plus = row.get("budget_factor", 1.0), row.get("budget_plus", 0.0)
    rule = row["budget_path"]
    if factor != 1.0:
        rule = f"{factor:.3g} × {rule}"
    if plus:
        rule = f"{rule} + {plus:g} ns"
    return f"≤ {rule}"


def _cell(row: dict | None) -> str:
    if row is None or row["group"] is None:
        return "—"
    if row["ours_ns"] is None:
        return "failed" if row["ours_note"] else "not measured"
    text = f"{_time(row['ours_ns'])}, {'within' if within_budget(row) else '**over**'}"
    # Another library's paths only: a row's reference paths may be interop-core's own.
    timed = [p for p in row["peers"] if p["ns"] is not None and not p.get("ours")]
    if timed:
        best = min(timed, key=lambda p: p["ns"])
        text += f"; {best['name']}: {_time(best['ns'])}"
    return text.replace("|", "/")


def budget_table(runs: list[Run]) -> str:
    """Every DESIGN.md budget line (and each to() pair) with each machine's number."""
    if not runs:
        return "(no runs recorded yet)"
    per_run = [{row["line"]: row for row in budget_rows(run.results)} for run in runs]
    lines: list[str] = []
    for rows in per_run:
        lines += [line for line in rows if line not in lines]
    out = ["| budget line | budget | " + " | ".join(f"{run.label}: ours; fastest peer"
                                                   for run in runs) + " |",
           "| --- | --- |" + " --- |" * len(runs)]
    for line in lines:
        measured = [rows.get(line) for rows in per_run]
        if all(row is None or row["group"] is None for row in measured):
            continue
        reference = next(row for row in measured if row is not None and row["group"] is not None)
        rule = ("≤ the fastest of the target's own imports"
                if line.endswith("≤ the target's own import") else _rule(reference))
        out.append(f"| {line} | {rule} | " + " | ".join(_cell(row) for row in measured) + " |")
    return "\n".join(out)


def environments(runs: list[Run]) -> str:
    """One bullet per recorded run: date, hardware, versions, command, page."""
    out = []
    for run in runs:
        remark = f" {run.data['remark']}" if run.data.get("remark") else ""
        out.append(f"- **{run.label}** ([every path](#{ANCHORS[run.name]}), "
                   f"{run.env.get('date') or 'date not recorded'}): "
                   f"{environment_line(run.env)}. `{run.data['command']}`, {run.data['mode']} "
                   f"mode.{remark}")
    return "\n".join(out) or "No runs recorded yet."


def headline_figures(runs: list[Run]) -> str:
    """The headline figure of each run that has one."""
    out = []
    for run in runs:
        chart = run.chart("headline")
        if chart.exists():
            out.append(f"![{run.label}: time per call divided by the fastest other library's]"
                       f"(../{chart.relative_to(ROOT).as_posix()})")
    return "\n\n".join(out) or "(no charts drawn yet: python benchmarks/publish.py)"


def _splice(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {marker}:start -->\n).*?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE}: markers <!-- {marker}:start/end --> not found")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def generated(runs: list[Run]) -> dict[Path, str]:
    """Every file this script writes but the charts, with its content."""
    files = {RESULTS / f"{run.name}.md": results_page(run) for run in runs}
    text = PAGE.read_text()
    text = _splice(text, "environments", environments(runs))
    text = _splice(text, "headline-figures", headline_figures(runs))
    text = _splice(text, "budget-table", budget_table(runs))
    files[PAGE] = text
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-charts", action="store_true",
                        help="leave the charts as they are (no matplotlib needed)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a page or docs/performance.md is not "
                             "what the recorded JSON gives")
    args = parser.parse_args(argv)
    runs = load_runs()
    if not (args.check or args.no_charts):
        for run in runs:
            draw_charts(run)
    stale = []
    for path, content in generated(runs).items():
        if path.exists() and path.read_text() == content:
            continue
        stale.append(path.relative_to(ROOT).as_posix())
        if not args.check:
            path.write_text(content)
    if args.check:
        if stale:
            print("not regenerated from the recorded JSON: " + ", ".join(stale)
                  + " (run python benchmarks/publish.py)", file=sys.stderr)
            return 1
        print("pages and docs match the recorded JSON")
        return 0
    print("published " + (", ".join(f"{run.name}.json" for run in runs) or "nothing")
          + ("; updated " + ", ".join(stale) if stale else "; every page was up to date"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
