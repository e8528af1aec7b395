"""Fill the budget table of docs/performance.md from benchmarks/results/{cpu,gpu}.json.

Usage::

    python benchmarks/publish.py

Reads whichever of ``cpu.json`` (written by ``scripts/bench_cpu.sh``) and ``gpu.json`` (written
by ``scripts/gpu_check.sh`` on the GPU machine, then copied here) exist, and rewrites the part of
``docs/performance.md`` between the ``budget-table`` markers: for every DESIGN.md budget line, our
number beside the peers', on CPU and on GPU.  Also rewrites the ``environments`` block.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from interop_core.bench._harness import Measurement  # noqa: E402
from interop_core.bench._report import (  # noqa: E402
    _fmt_ns,
    _peer_text,
    budget_rows,
    budget_text,
    environment_line,
)

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
RUNS = (("cpu", "CPU machine"), ("gpu", "GPU machine"))


def _load(name: str) -> tuple[dict, list[Measurement]] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data, [Measurement(**r) for r in data["results"]]


def _cell(row: dict) -> tuple[str, str]:
    if row is None or row["group"] is None:
        return "not measured", ""
    return _fmt_ns(row["ours_ns"]), _peer_text(row["peers"]).replace("|", "/")


def budget_table(runs: dict[str, tuple[dict, list[Measurement]] | None]) -> str:
    """The DESIGN.md budget lines, with each run's ours and peers side by side."""
    per_run = {name: (budget_rows(loaded[1]) if loaded else None) for name, loaded in runs.items()}
    header = "| budget line | budget, ns |"
    rule = "| --- | ---: |"
    for _name, label in RUNS:
        header += f" {label}: ours, ns | {label}: peers, ns |"
        rule += " ---: | --- |"
    lines = [header, rule]
    lines_source = next((rows for rows in per_run.values() if rows), None)
    if lines_source is None:
        return "(no results yet)"
    for i, base in enumerate(lines_source):
        cells = [base["line"], budget_text(base)]
        for name, _ in RUNS:
            rows = per_run.get(name)
            if rows is None:
                cells += ["(no run recorded yet)", ""]
            else:
                cells += list(_cell(rows[i]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environments(runs) -> str:
    """One bullet per recorded run: hardware and versions."""
    out = []
    for name, label in RUNS:
        loaded = runs.get(name)
        if loaded is None:
            out.append(f"- {label}: no run recorded yet.")
        else:
            data = loaded[0]
            out.append(f"- {label} (`{name}.json`, `{data['command']}`, {data['mode']} mode): "
                       f"{environment_line(data['environment'])}")
    return "\n".join(out)


def _splice(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {marker}:start -->\n).*?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE}: markers <!-- {marker}:start/end --> not found")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> int:
    runs = {name: _load(name) for name, _ in RUNS}
    text = PAGE.read_text()
    text = _splice(text, "budget-table", budget_table(runs))
    text = _splice(text, "environments", environments(runs))
    PAGE.write_text(text)
    print(f"updated {PAGE.relative_to(ROOT)} from "
          + ", ".join(f"{n}.json" for n, r in runs.items() if r) or "nothing")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
