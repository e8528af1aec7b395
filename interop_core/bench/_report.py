"""Turning results into a markdown page, JSON, the DESIGN.md budget table and a PNG chart."""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import os
import platform
import re
import statistics
from collections.abc import Iterable

from ..handoff._matrix import TARGET_IMPORTS
from ._harness import NOT_APPLICABLE, Measurement

__all__ = ["BUDGET", "environment", "environment_line", "budget_rows", "budget_text",
           "format_markdown", "format_budget", "format_section", "headline_rows",
           "machine_label", "plot", "plot_headline", "plot_section", "section_rows",
           "within_budget"]

# The DESIGN.md performance budget: (line, budget, groups that measure it, most relevant first,
# our path, peer paths).  A budget is ns, or the name of another path of the same group whose
# time in the same run is the budget.  A GPU run has the CUDA groups; a CPU run the host ones.
# The same-stream line compares two calls that differ only in that decision: an int handle
# naming the producer's stream against -1 (an int meaning "no synchronisation"), both resolved
# the same way; `view()` and `view(x, None)` are shown beside them.
# A relative budget compares the two paths round by round (their batches were taken in turn):
# it is kept when the median of the paired ratios ours / reference is at most 1, i.e. ours took
# no longer in at least half of the rounds.  A relative budget with a factor, (path, factor),
# allows ours that many times the reference (median paired ratio at most the factor);
# (path, factor, ns) allows that many ns more on top (the paired ratios are then of ours minus
# those ns).
_LAUNCH_GROUPS = ("launch(16 × torch cuda)", "launch(16 × torch cpu)")
_ACCESSOR_GROUPS = ("view accessors (torch cuda)", "view accessors (torch cpu)")
_BARE = "bare attribute read (view.owner)"
_SHARD_PER_SHARD = "interop_core shards(), per shard"
_SHARD_VIEW = ("interop_core view(), one single-device array of a shard's shape per device, "
               "per view")
_SHARD_VIEW_AGAIN = ("interop_core view(), one single-device array of a shard's shape, again "
                     "and again")
_SHARD_BY_HAND = "view() of each addressable_shards[i].data, per shard"
_ASSEMBLE = "interop_core to(Shards.from_pieces(pieces), 'jax', sharding=)"
_ASSEMBLE_PEER = "jax make_array_from_single_device_arrays over from_dlpack(piece, device=)"
_ASSEMBLE_HOST_PEER = "jax make_array_from_single_device_arrays over device_put(numpy piece)"

BUDGET: tuple[tuple[str, float | str | tuple[str, float] | tuple[str, float, float],
                    tuple[str, ...], str,
                    tuple[str, ...]], ...] = (
    ("view(torch tensor, CPU)", 100, ("view(torch cpu)",), "interop_core view()",
     ("cuda.core from_dlpack", "tvm_ffi.from_dlpack")),
    ("view(torch tensor, CUDA)", 100, ("view(torch cuda)",), "interop_core view()",
     ("cuda.core from_dlpack", "tvm_ffi.from_dlpack")),
    ("view(numpy array)", 100, ("view(numpy cpu)",), "interop_core view()",
     ("cuda.core from_dlpack", "tvm_ffi.from_dlpack")),
    ("view(cupy array)", 300, ("view(cupy cuda)",), "interop_core view()",
     ("cuda.core from_dlpack", "cupy.asarray")),
    ("view(numba device array)", 500, ("view(numba cuda)",), "interop_core view()",
     ("cuda.core from_dlpack", "cuda.core from_any_interface", "numba.cuda.as_cuda_array")),
    ("view(jax array)", 1500, ("view(jax cuda)", "view(jax cpu)"), "interop_core view()",
     ("cuda.core from_dlpack", "jax __dlpack__ (capsule only)")),
    ("view with stream ordering", 3000, ("view(torch cuda, stream=)", "view(cupy cuda, stream=)"),
     "interop_core view(stream=int handle)", ("cuda.core from_dlpack (synced)",)),
    ("same-stream view costs no more than an unsynced one", "interop_core view(stream=-1)",
     ("view(torch cuda, same stream)",), "interop_core view(stream=int handle)",
     ("interop_core view()", "interop_core view(stream=None)",
      "interop_core view(stream=torch stream)", "cuda.core from_dlpack (synced)")),
    ("to(torch tensor, \"cupy\")", 3000, ("to(torch cuda, 'cupy')",), "interop_core to()",
     ("cupy.from_dlpack",)),
    ("to(cupy array, \"torch\")", 2000, ("to(cupy cuda, 'torch')",), "interop_core to()",
     ("torch.from_dlpack",)),
    ("shards(jax array), per shard, 2 devices", (_SHARD_VIEW, 1.2),
     ("shards(jax over 2 cuda devices)", "shards(jax over 2 cpu devices)"), _SHARD_PER_SHARD,
     (_SHARD_BY_HAND, _SHARD_VIEW_AGAIN)),
    ("shards(jax array), per shard, 8 devices", (_SHARD_VIEW, 1.2),
     ("shards(jax over 8 cpu devices)",), _SHARD_PER_SHARD, (_SHARD_BY_HAND, _SHARD_VIEW_AGAIN)),
    ("to(shards, \"jax\", sharding=), 2 devices", _ASSEMBLE_PEER,
     ("assemble(jax over 2 cuda devices)", "assemble(jax over 2 cpu devices)"), _ASSEMBLE,
     (_ASSEMBLE_HOST_PEER,)),
    ("to(shards, \"jax\", sharding=), 8 devices", _ASSEMBLE_PEER,
     ("assemble(jax over 8 cpu devices)",), _ASSEMBLE, (_ASSEMBLE_HOST_PEER,)),
    ("copy_to, contiguous D2D, ≥ 90% of torch's throughput", ("torch Tensor.copy_", 1 / 0.9),
     ("copy D2D 256 MiB contiguous", "copy D2D 64 MiB contiguous"), "interop_core copy_from",
     ("torch Tensor.copy_", "cupy copyto")),
    ("copy_to, contiguous H2D (pinned), ≥ 90% of torch's throughput",
     ("torch Tensor.copy_", 1 / 0.9), ("copy H2D 256 MiB pinned", "copy H2D 64 MiB pinned"),
     "interop_core copy_from", ("torch Tensor.copy_",)),
    ("copy_to, contiguous D2H (pinned), ≥ 90% of torch's throughput",
     ("torch Tensor.copy_", 1 / 0.9), ("copy D2H 256 MiB pinned", "copy D2H 64 MiB pinned"),
     "interop_core copy_from", ("torch Tensor.copy_",)),
    ("copy_to, transpose 4096×4096 float32, ≤ 1.2× torch", ("torch Tensor.copy_", 1.2),
     ("copy transpose 4096x4096 float32",), "interop_core copy_from", ("cupy copyto",)),
    ("copy_to, transpose 4096×4096 float32, ≤ 1.2× cupy", ("cupy copyto", 1.2),
     ("copy transpose 4096x4096 float32",), "interop_core copy_from", ("torch Tensor.copy_",)),
    ("copy_to, [:, ::2] 4096×4096 float32, ≤ 1.2× torch", ("torch Tensor.copy_", 1.2),
     ("copy [:, ::2] 4096x4096 float32",), "interop_core copy_from", ("cupy copyto",)),
    ("copy_to, [:, ::2] 4096×4096 float32, ≤ 1.2× cupy", ("cupy copyto", 1.2),
     ("copy [:, ::2] 4096x4096 float32",), "interop_core copy_from", ("torch Tensor.copy_",)),
    ("copy_to, 4-D permute, ≤ 1.2× torch", ("torch Tensor.copy_", 1.2),
     ("copy 4-D permute (64, 128, 64, 32) float32",), "interop_core copy_from",
     ("cupy copyto",)),
    ("copy_to, 4-D permute, ≤ 1.2× cupy", ("cupy copyto", 1.2),
     ("copy 4-D permute (64, 128, 64, 32) float32",), "interop_core copy_from",
     ("torch Tensor.copy_",)),
    ("copy_to of 4 bytes: host-side cost", 5000,
     ("copy 4 bytes D2D (host-side cost per call)",), "interop_core copy_from(stream=)",
     ("interop_core copy_from(stream=), producers on it",
      "torch Tensor.copy_ (in a stream context)")),
    ("`import interop_core`", 30e6, ("import interop_core",),
     "interop_core (fresh interpreter)", ()),
    ("third-party compiled reader (public C ABI) vs a first-party one", (
        "view(numpy.ndarray): first-party reader", 1.1),
     ("readers: public C ABI, third party vs first party",),
     "view(bytetensor.CTensor): third-party C reader", ()),
    ("launch_args, 16 torch args, key + pointers", ("view() loop, no key", 1.2),
     _LAUNCH_GROUPS, "interop_core launch_args (key + pointers)",
     ("view() loop + tuple key + pointers", "Helion's fast key (torch API)",
      "cuda.core from_dlpack loop")),
    ("launch_args, each extra torch argument", 60,
     ("launch: per extra torch argument (cuda)", "launch: per extra torch argument (cpu)"),
     "interop_core launch_args (key + pointers)", ()),
    ("`@viewable`, view mode, 16 torch args", ("view() loop, no key", 1.1), _LAUNCH_GROUPS,
     "interop_core @viewable (view mode)", ()),
    ("view.shape", (_BARE, 1.0, 30.0), _ACCESSOR_GROUPS, "view.shape", (_BARE,)),
    ("view.strides", (_BARE, 1.0, 30.0), _ACCESSOR_GROUPS, "view.strides", (_BARE,)),
    ("view.strides_in_bytes", (_BARE, 1.0, 30.0), _ACCESSOR_GROUPS, "view.strides_in_bytes",
     (_BARE,)),
)

# The DESIGN.md line "every to() pair <= 1.0x the target framework's own import": one budget row
# per pair measured, whose budget is the fastest of the target's own imports of the same source
# in the same run (compared round by round, as every relative budget).  The names are those of
# _matrix.TARGET_IMPORTS, which the bench's to() section times.
# Budgets that are a fraction of another path of the same group: (line, fraction, groups that
# measure it, most relevant first, our path, the reference path).  Judged round by round on
# ours / (fraction x reference), as every relative budget.
FRACTION_BUDGETS: tuple[tuple[str, float, tuple[str, ...], str, str], ...] = (
    ("view(jax array) ≤ 0.5× jax's own __dlpack__()", 0.5, ("view(jax cuda)", "view(jax cpu)"),
     "interop_core view()", "jax __dlpack__ (capsule only)"),
)
_TO_GROUP = re.compile(r"^to\((?P<source>.+), '(?P<target>[\w.]+)'\)$")

SECTION_TITLES = {
    "view": "view() without stream synchronisation",
    "from": "the StridedMemoryView.from_* constructors and the cuda.core compat layer beside "
            "view() and cuda.core's own",
    "readers": "first-party plugin readers against their fallbacks and the generic path",
    "stream": "view() with a consumer stream (ordered after the producer)",
    "to": "to(): zero-copy handoff between frameworks",
    "viewable": "@viewable on a kernel-launch-like function (1, 4, 16 tensor arguments)",
    "launch": "the launch path: launch_args, @viewable and hand-written launchers; view accessors",
    "ndim": "cost against the number of dimensions",
    "threads": "threads viewing at once (ns per call seen by each thread)",
    "dispatch": "what the exact-type table lookup adds (measured in C, paired blocks)",
    "shards": "shards() of sharded jax arrays, per shard, and assembling a jax global array",
    "copies": "copies: host copies against numpy (host time); GPU copies against torch and "
              "cupy on the same buffers (device time, CUDA events)",
    "import": "import time (fresh interpreter, median)",
}

_VERSIONED = ("numpy", "torch", "jax", "cupy", "numba", "cuda.core", "tvm_ffi", "ml_dtypes")
_DISTS = {"cuda.core": "cuda-core", "tvm_ffi": "apache-tvm-ffi", "cupy": "cupy"}


def environment() -> dict:
    """The date, the machine, the Python, and the versions of interop-core and every peer
    measured."""
    from .. import __version__

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    versions = {"interop_core": __version__}
    for module in _VERSIONED:
        top = module.split(".")[0]
        if top not in __import__("sys").modules:
            continue  # only what this run imported, hence measured
        try:
            versions[module] = importlib.import_module(module).__version__
        except Exception:
            try:
                versions[module] = importlib.metadata.version(_DISTS.get(module, module))
            except Exception:
                continue
    gpu, gpus = None, 0
    try:
        from ..cuda import _cuda

        gpus = _cuda.device_count()
        if gpus > 0:
            version = _cuda.driver_version()
            gpu = f"{_cuda.device_name(0)}, driver {version // 1000}.{version % 1000 // 10}"
    except Exception:
        pass
    return {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
            "gpu": gpu, "gpus": gpus, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def environment_line(env: dict) -> str:
    """One markdown line naming the hardware and versions."""
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    count = env.get("gpus") or 1
    gpu = (f"; GPU: {count} × {env['gpu']}" if count > 1 else f"; GPU: {env['gpu']}"
           ) if env.get("gpu") else "; no GPU"
    return f"{env['cpu']} ({env['cores']} cores){gpu}; Python {env['python']}; {versions}"


def _fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "failed"
    if ns >= 1e6:
        return f"{ns / 1e6:,.1f} ms"
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:,.1f}"


def _time_text(r: Measurement) -> str:
    """A path's time, or what happened instead (failed, not applicable)."""
    return _fmt_ns(r.ns) if r.ns is not None else r.status


def _reference_by_group(results: Iterable[Measurement]) -> dict[str, Measurement]:
    """Each group's reference path for ratios: its first timed interop-core path."""
    reference: dict[str, Measurement] = {}
    for r in results:
        if r.ours and r.ns:
            reference.setdefault(r.group, r)
    return reference


def markdown_text(text: str) -> str:
    """``text`` for a markdown table cell: pipes and brackets escaped, so that a path named
    like Python code (Triton's ``kernel[grid](...)``) is not read as a column or a link."""
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def format_section(results: list[Measurement]) -> str:
    """A markdown table: operation, path, ns per call, path ÷ ours (of the medians, and round
    by round: its median and quartiles, where the paths were timed interleaved), note."""
    references = _reference_by_group(results)
    lines = ["| operation | path | ns / call | × ours | × ours, per round | note |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in results:
        name = f"**{markdown_text(r.name)}**" if r.ours else markdown_text(r.name)
        reference = references.get(r.group)
        ratio = f"{r.ns / reference.ns:.2f}" if (reference and r.ns is not None) else ""
        paired = (_paired_ratio(r, reference)
                  if reference is not None and reference is not r and r.ns is not None else None)
        per_round = f"{paired[1]:.2f} ({paired[0]:.2f}–{paired[2]:.2f})" if paired else ""
        note = markdown_text(r.note)
        lines.append(f"| {r.group} | {name} | {_time_text(r)} | {ratio} | {per_round} "
                     f"| {note} |")
    return "\n".join(lines)


def budget_rows(results: list[Measurement]) -> list[dict]:
    """For each DESIGN.md budget line: where it was measured, our ns, the peers' ns."""
    by_key = {(r.group, r.name): r for r in results}
    groups = {r.group for r in results}
    rows = []
    for line, budget, candidates, ours_name, peer_names in BUDGET:
        group = next((g for g in candidates if g in groups), None)
        factor, plus = 1.0, 0.0
        if isinstance(budget, tuple):
            budget, factor, plus = (*budget, 0.0) if len(budget) == 2 else budget
        row = {"line": line, "budget_ns": budget, "budget_path": None, "group": group,
               "ours_ns": None, "ours_note": "", "peers": [], "budget_factor": factor,
               "budget_plus": plus}
        ours = by_key.get((group, ours_name)) if group is not None else None
        if ours is not None:
            row["ours_ns"], row["ours_note"] = ours.ns, ours.note
        if isinstance(budget, str):
            reference = by_key.get((group, budget))
            row["budget_ns"] = (None if reference is None or reference.ns is None
                                else reference.ns * factor + plus)
            row["budget_path"] = budget
            row["paired_ratio"] = _paired_ratio(ours, reference, plus)
        if group is not None:
            for peer in peer_names:
                p = by_key.get((group, peer))
                if p is not None:
                    row["peers"].append(_peer(p))
        rows.append(row)
    return rows + _fraction_rows(results) + _handoff_rows(results)


def _peer(r: Measurement) -> dict:
    return {"name": r.name, "ns": r.ns, "note": r.note, "status": r.status, "ours": r.ours}


def _fraction_rows(results: list[Measurement]) -> list[dict]:
    by_key = {(r.group, r.name): r for r in results}
    groups = {r.group for r in results}
    rows = []
    for line, fraction, candidates, ours_name, reference_name in FRACTION_BUDGETS:
        group = next((g for g in candidates if g in groups), None)
        row = {"line": line, "budget_ns": None, "budget_path": None, "group": group,
               "ours_ns": None, "ours_note": "", "peers": []}
        if group is not None:
            ours, reference = by_key.get((group, ours_name)), by_key.get((group, reference_name))
            row["budget_path"] = f"{fraction:g} × {reference_name}"
            if ours is not None:
                row["ours_ns"], row["ours_note"] = ours.ns, ours.note
            if reference is not None:
                row["peers"].append(_peer(reference))
                if reference.ns is not None:
                    row["budget_ns"] = reference.ns * fraction
                paired = _paired_ratio(ours, reference)
                if paired is not None:
                    row["paired_ratio"] = tuple(q / fraction for q in paired)
        rows.append(row)
    return rows


def _handoff_rows(results: list[Measurement]) -> list[dict]:
    """One row per to() pair: ours against the fastest of the target's own imports."""
    by_group: dict[str, list[Measurement]] = {}
    for r in results:
        if r.section == "to":
            by_group.setdefault(r.group, []).append(r)
    rows = []
    for group, measured in by_group.items():
        match = _TO_GROUP.match(group)
        if match is None:
            continue
        names = TARGET_IMPORTS.get(match["target"], ())
        ours = next((r for r in measured if r.name == "interop_core to()"), None)
        imports = [r for r in measured if r.name in names]
        timed = [r for r in imports if r.ns is not None]
        best = min(timed, key=lambda r: r.ns) if timed else None
        row = {"line": f"{group} ≤ the target's own import", "budget_ns": None,
               "budget_path": best.name if best else " / ".join(names) or "the target's import",
               "group": group, "ours_ns": None, "ours_note": "",
               "peers": [_peer(r) for r in imports]}
        if ours is not None:
            row["ours_ns"], row["ours_note"] = ours.ns, ours.note
        if best is not None:
            row["budget_ns"] = best.ns
            row["paired_ratio"] = _paired_ratio(ours, best)
        elif imports:
            # Every import of the target refused this source: ours is the only way across.
            row["target_cannot_import"] = True
            row["budget_path"] = "none: the target's own imports cannot take this source"
        rows.append(row)
    return rows


def _paired_ratio(ours: Measurement | None, reference: Measurement | None,
                  plus: float = 0.0) -> tuple | None:
    """(lower quartile, median, upper quartile) of (ours - plus) / reference, round by round."""
    if ours is None or reference is None:
        return None
    a, b = ours.extra.get("rounds"), reference.extra.get("rounds")
    if not a or not b or len(a) != len(b) or min(b) <= 0:
        return None
    ratios = sorted((x - plus) / y for x, y in zip(a, b, strict=True))
    if len(ratios) < 3:
        return None
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return (q1, q2, q3)


def within_budget(row: dict) -> bool:
    """Whether a budget row is kept (see BUDGET for how a relative budget is judged)."""
    if row["ours_ns"] is not None and row.get("target_cannot_import"):
        return True
    if row["ours_ns"] is None or row["budget_ns"] is None:
        return False
    paired = row.get("paired_ratio")
    if paired is not None:
        return paired[1] <= row.get("budget_factor", 1.0)
    return row["ours_ns"] <= row["budget_ns"]


def budget_text(row: dict) -> str:
    """A row's budget: ns, and for a relative budget the path whose time it is."""
    if row.get("target_cannot_import"):
        return row["budget_path"]
    if row["budget_path"] is None:
        return _fmt_ns(row["budget_ns"])
    factor, plus = row.get("budget_factor", 1.0), row.get("budget_plus", 0.0)
    rule = row["budget_path"]
    if factor != 1.0:
        rule = f"{factor:g} × {rule}"
    if plus:
        rule = f"{rule} + {plus:g} ns"
    if row["budget_ns"] is None:
        return f"≤ {rule} of the same run"
    text = f"{_fmt_ns(row['budget_ns'])} ({rule})"
    paired = row.get("paired_ratio")
    if paired is not None:
        label = f"(ours - {plus:g} ns)" if plus else "ours"
        text += (f"; {label} / it, per round: {paired[1]:.2f} "
                 f"(quartiles {paired[0]:.2f}–{paired[2]:.2f})")
    return text


def _peer_text(peers: list[dict]) -> str:
    if not peers:
        return "—"
    return "; ".join(f"{p['name']}: {_fmt_ns(p['ns'])}" if p["ns"] is not None
                     else f"{p['name']}: not applicable ({p['note'][:60]})"
                     if p.get("status") == NOT_APPLICABLE
                     else f"{p['name']}: fails ({p['note'][:60]})" for p in peers)


def format_budget(results: list[Measurement]) -> str:
    """The DESIGN.md budget table filled with this run's numbers."""
    lines = ["| budget line | measured as | ours, ns | peers in the same run, ns | budget, ns | "
             "within |", "| --- | --- | ---: | --- | ---: | :---: |"]
    for row in budget_rows(results):
        if row["group"] is None:
            lines.append(f"| {row['line']} | not measured here | | | {budget_text(row)} | |")
            continue
        ok = "yes" if within_budget(row) else "no"
        lines.append(f"| {row['line']} | {row['group']} | {_fmt_ns(row['ours_ns'])} | "
                     f"{_peer_text(row['peers']).replace('|', '/')} | "
                     f"{budget_text(row)} | {ok} |")
    return "\n".join(lines)


def machine_label(env: dict) -> str:
    """The machine a run was taken on, in a few words: ``"NVIDIA H100 80GB HBM3"``,
    ``"2 × NVIDIA H200"``, ``"CPU machine (AMD EPYC, 2 cores)"``."""
    gpu = env.get("gpu")
    if gpu:
        name = gpu.split(", driver")[0]
        count = env.get("gpus") or 1
        return f"{count} × {name}" if count > 1 else name
    cpu = re.sub(r"\s+\d+-Core Processor$", "", env.get("cpu") or "unknown CPU")
    return f"CPU machine ({cpu}, {env.get('cores')} cores)"


def format_markdown(results: list[Measurement], env: dict, command: str, mode: str, *,
                    charts: dict[str, str] | None = None, remark: str = "") -> str:
    """The whole results page: machine, date and versions, budget table, a table per section.

    Parameters
    ----------
    results : list of Measurement
    env : dict
        :func:`environment` of the run.
    command : str
        The command line that produced the results.
    mode : {"full", "quick"}
    charts : dict, optional
        Image paths (relative to the page) by section name, and ``"headline"`` for the
        headline figure; each is shown above its table.
    remark : str, optional
        What a reader must know about the run (e.g. a loaded host), shown under the header.
    """
    charts = charts or {}
    by_section: dict[str, list[Measurement]] = {}
    for r in results:
        by_section.setdefault(r.section, []).append(r)
    date = env.get("date") or "date not recorded"
    parts = [
        f"# Benchmark results: {machine_label(env)}",
        f"Measured {date}. Environment: {environment_line(env)}.",
        f"Command: `{command}` ({mode} mode{', numbers indicative only' if mode == 'quick' else ''}"
        "). Median ns per call; **bold** paths are interop-core's; \"× ours\" is the path's time "
        "divided by the first interop-core path of its operation (above 1: slower than us); "
        "\"not applicable\" marks a peer's path that cannot run on this object or device.",
    ]
    if remark:
        parts.append(f"> {remark}")
    if "headline" in charts:
        parts.append(f"![interop-core's time per call divided by the fastest peer's, per "
                     f"DESIGN.md budget line]({charts['headline']})")
    parts.append("## DESIGN.md budget\n\n" + format_budget(results))
    for section, rows in by_section.items():
        body = format_section(rows)
        if section in charts:
            body = f"![{SECTION_TITLES.get(section, section)}]({charts[section]})\n\n{body}"
        parts.append(f"## {SECTION_TITLES.get(section, section)}\n\n{body}")
    return "\n\n".join(parts) + "\n"


# -- charts -----------------------------------------------------------------------------------

_OURS_COLOR, _OURS_ALT_COLOR, _PEER_COLOR = "#1f77b4", "#9ecae1", "#a0a0a0"
_OVER_COLOR, _BUDGET_COLOR = "#e6550d", "#c51b1b"


def _short_line(line: str) -> str:
    # "copy_to, transpose 4096×4096 float32, ≤ 1.2× torch" and its "≤ 1.2× cupy" twin are one
    # operation: the headline shows it once, against the tighter budget.
    return re.split(r",? [≤≥] ", line)[0]


def headline_rows(results: list[Measurement]) -> list[dict]:
    """One row per DESIGN.md budget line measured against another library, for the headline.

    Each row: ``label``, ``group``, ``ours_ns``, ``peer`` and ``peer_ns`` (the fastest path of
    another library in the same operation and run), ``ratio`` (ours / that peer), ``budget``
    (the budget as a ratio to that peer, or None) and ``within``.  The to() pairs are one row:
    the pair slowest against its target's own import.
    """
    by_key = {(r.group, r.name): r for r in results}
    merged: dict[tuple[str, str], dict] = {}
    to_rows = []
    for row in budget_rows(results):
        if row["group"] is None or row["ours_ns"] is None:
            continue
        if row["line"].endswith("≤ the target's own import"):
            to_rows.append(row)
            continue
        names = [p["name"] for p in row["peers"]]
        if row["budget_path"] and not row["budget_path"][0].isdigit():
            names.append(row["budget_path"])
        others = [by_key.get((row["group"], n)) for n in names]
        timed = [m for m in others if m is not None and not m.ours and m.ns is not None]
        if not timed:
            continue        # measured against ourselves only (accessors, per shard, ...)
        best = min(timed, key=lambda m: m.ns)
        key = (row["group"], _short_line(row["line"]))
        budget = row["budget_ns"] / best.ns if row["budget_ns"] is not None else None
        entry = merged.get(key)
        if entry is not None:
            if budget is not None and (entry["budget"] is None or budget < entry["budget"]):
                entry["budget"], entry["within"] = budget, within_budget(row)
            continue
        merged[key] = {"label": key[1], "group": row["group"], "ours_ns": row["ours_ns"],
                       "peer": best.name, "peer_ns": best.ns, "ratio": row["ours_ns"] / best.ns,
                       "budget": budget, "within": within_budget(row)}
    rows = list(merged.values())
    pairs = [r for r in to_rows if r["budget_ns"] is not None]
    if pairs:
        worst = max(pairs, key=lambda r: r["ours_ns"] / r["budget_ns"])
        rows.append({"label": f"every to() pair; slowest: {worst['group']}",
                     "group": worst["group"], "ours_ns": worst["ours_ns"],
                     "peer": worst["budget_path"], "peer_ns": worst["budget_ns"],
                     "ratio": worst["ours_ns"] / worst["budget_ns"], "budget": 1.0,
                     "within": all(within_budget(r) for r in to_rows)})
    return rows


def section_rows(results: list[Measurement], section: str) -> list[dict]:
    """Per operation of a section: interop-core's first path and what it is compared with.

    Each row: ``group`` and ``bars``, a list of (label, ns, kind) with kind ``"ours"`` (the
    operation's first interop-core path), ``"peer"`` (the fastest path of another library) or,
    where no other library was timed, ``"alternative"`` (up to three more interop-core paths:
    a fallback, the generic path, ...).
    """
    groups: dict[str, list[Measurement]] = {}
    for r in results:
        if r.section == section and r.ns is not None:
            groups.setdefault(r.group, []).append(r)
    rows = []
    for group, measured in groups.items():
        ours = [r for r in measured if r.ours]
        peers = [r for r in measured if not r.ours]
        bars = []
        if ours:
            bars.append((ours[0].name, ours[0].ns, "ours"))
        if peers:
            best = min(peers, key=lambda r: r.ns)
            bars.append((best.name, best.ns, "peer"))
        else:
            bars += [(r.name, r.ns, "alternative") for r in ours[1:4]]
        rows.append({"group": group, "bars": bars})
    return rows


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install matplotlib (or "
                          "interop-core[bench])") from exc
    return plt


def _time(ns: float) -> str:
    """A time for a chart: 70.9 ns, 5.9 µs, 5.5 ms."""
    for scale, unit in ((1e6, "ms"), (1e3, "µs")):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _times(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.0f}×"


def plot_headline(results: list[Measurement], path: str, title: str) -> bool:
    """The headline figure: per budget line, interop-core's time ÷ the fastest peer's (log
    scale), the budget drawn as a red mark on each row, parity as a dashed line.

    Returns
    -------
    bool
        False (nothing written) when no budget line was measured against another library.
    """
    rows = headline_rows(results)
    if not rows:
        return False
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(5.5, 0.8 + 0.3 * len(rows)))
    ys = range(len(rows))
    ax.barh(ys, [r["ratio"] for r in rows], height=0.6,
            color=[_OURS_COLOR if r["within"] else _OVER_COLOR for r in rows])
    for y, r in zip(ys, rows, strict=True):
        if r["budget"] is not None:
            ax.plot([r["budget"]] * 2, [y - 0.42, y + 0.42], color=_BUDGET_COLOR, lw=2.2)
        ax.text(1.02, y, f"{_times(r['ratio'])}: {_time(r['ours_ns'])} against "
                f"{_time(r['peer_ns'])}, {_clip(r['peer'], 40)}",
                transform=ax.get_yaxis_transform(), va="center", fontsize=7.5)
    ax.set_yticks(list(ys), [_clip(r["label"], 60) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xscale("log")
    values = [r["ratio"] for r in rows] + [r["budget"] for r in rows if r["budget"]] + [1.0]
    ax.set_xlim(min(values) / 1.6, max(values) * 1.6)
    ax.axvline(1.0, color="black", ls="--", lw=0.8)
    ax.grid(axis="x", which="both", alpha=0.25)
    ax.tick_params(axis="x", labelsize=8)
    from matplotlib.ticker import LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("interop-core's time ÷ the fastest other library's in the same run\n"
                  "(log scale; left of the dashed line: faster)", fontsize=8)
    ax.legend(handles=[Patch(color=_OURS_COLOR, label="within budget"),
                       Patch(color=_OVER_COLOR, label="over budget"),
                       Line2D([], [], color=_BUDGET_COLOR, lw=2.2, label="budget")],
              fontsize=7.5, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3,
              frameon=False)
    ax.set_title(title, fontsize=10, loc="left", pad=22)
    _save(fig, path)
    plt.close(fig)
    return True


def plot_section(results: list[Measurement], section: str, path: str, title: str) -> bool:
    """One section's chart: per operation, interop-core's time beside the fastest peer's (or
    interop-core's alternatives where no peer ran), ns per call on a log scale.

    Returns
    -------
    bool
        False (nothing written) when the section has no timed path.
    """
    rows = section_rows(results, section)
    if not rows:
        return False
    plt = _pyplot()
    from matplotlib.patches import Patch

    colors = {"ours": _OURS_COLOR, "peer": _PEER_COLOR, "alternative": _OURS_ALT_COLOR}
    bars, centers, y = [], [], 0.0
    for row in rows:
        first = y
        for label, ns, kind in row["bars"]:
            bars.append((y, label, ns, kind, row["bars"][0]))
            y += 1.0
        centers.append((first + y - 1.0) / 2)
        y += 0.7                                   # the gap between two operations
    fig, ax = plt.subplots(figsize=(5.5, 0.9 + 0.19 * y))
    for at, label, ns, kind, first in bars:
        ax.barh(at, ns, height=0.85, color=colors[kind])
        ratio = ""
        if kind != "ours" and first[2] == "ours":
            ratio = f" ({_times(ns / first[1])} ours)"
        ax.text(1.02, at, f"{_time(ns)}{ratio}  {_clip(label, 48)}",
                transform=ax.get_yaxis_transform(), va="center", fontsize=6.5)
    ax.set_yticks(centers, [_clip(row["group"], 60) for row in rows], fontsize=7.5)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(y - 0.7 + 0.2, -0.8)
    ax.set_xscale("log")
    from matplotlib.ticker import LogLocator, NullFormatter

    # Ticks at 1, 2, 5 of each decade, labelled as times: a range of less than two decades
    # would otherwise get overlapping scientific labels on its minor ticks.
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: _time(x)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="x", which="both", alpha=0.25)
    ax.tick_params(axis="x", labelsize=7.5)
    ax.set_xlabel("time per call (log scale)", fontsize=8)
    kinds = {bar[3] for bar in bars}
    ax.legend(handles=[Patch(color=colors[k], label=text) for k, text in (
        ("ours", "interop-core"), ("peer", "fastest other library"),
        ("alternative", "interop-core, other paths")) if k in kinds],
        fontsize=7.5, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False)
    ax.set_title(title, fontsize=10, loc="left", pad=22)
    _save(fig, path)
    plt.close(fig)
    return True


def _save(fig, path: str) -> None:
    """Write a chart as a PNG of 64 colours: a third of the bytes, the same picture (the charts
    are flat colours and text; Pillow comes with matplotlib)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=64, method=Image.Quantize.FASTOCTREE,
                                      dither=Image.Dither.NONE).save(path, optimize=True)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def plot(results: list[Measurement], path: str, title: str) -> dict[str, str]:
    """The headline figure at ``path`` and one chart per section beside it.

    A section's chart is ``path`` with ``-SECTION`` before the suffix (``out.png`` ->
    ``out-view.png``).

    Returns
    -------
    dict
        The files written: ``"headline"`` and each section name -> path.

    Raises
    ------
    ImportError
        When matplotlib is not installed (``pip install matplotlib``, or the ``bench`` extra).
    """
    _pyplot()
    written = {}
    if plot_headline(results, path, f"{title}\ntime per call ÷ the fastest other library's"):
        written["headline"] = path
    stem, dot, suffix = path.rpartition(".")
    if not dot:
        stem, suffix = path, "png"
    for section in dict.fromkeys(r.section for r in results):
        if section == "import":
            continue        # one number, in the table
        out = f"{stem}-{section}.{suffix}"
        if plot_section(results, section, out, f"{title}\n{SECTION_TITLES.get(section, section)}"):
            written[section] = out
    return written
