"""Turning results into a markdown page, JSON, the DESIGN.md budget table and a PNG chart."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import re
import statistics
from collections.abc import Iterable

from ..handoff._matrix import TARGET_IMPORTS
from ._harness import Measurement

__all__ = ["BUDGET", "environment", "budget_rows", "budget_text", "format_markdown",
           "format_budget", "format_section", "plot", "within_budget"]

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
    """The machine, the Python, and the versions of interop-core and every peer measured."""
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
    gpu = None
    try:
        from ..cuda import _cuda

        if _cuda.device_count() > 0:
            version = _cuda.driver_version()
            gpu = f"{_cuda.device_name(0)}, driver {version // 1000}.{version % 1000 // 10}"
    except Exception:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu,
            "python": platform.python_version(), "platform": platform.platform(),
            "versions": versions}


def environment_line(env: dict) -> str:
    """One markdown line naming the hardware and versions."""
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    gpu = f"; GPU: {env['gpu']}" if env.get("gpu") else "; no GPU"
    return f"{env['cpu']} ({env['cores']} cores){gpu}; Python {env['python']}; {versions}"


def _fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "failed"
    if ns >= 1e6:
        return f"{ns / 1e6:,.1f} ms"
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:,.1f}"


def _ours_by_group(results: Iterable[Measurement]) -> dict[str, float]:
    ours: dict[str, float] = {}
    for r in results:
        if r.ours and r.ns:
            ours.setdefault(r.group, r.ns)
    return ours


def format_section(results: list[Measurement]) -> str:
    """A markdown table: operation, path, ns per call, path ÷ ours, note."""
    ours = _ours_by_group(results)
    lines = ["| operation | path | ns / call | × ours | note |",
             "| --- | --- | ---: | ---: | --- |"]
    for r in results:
        name = f"**{r.name}**" if r.ours else r.name
        base = ours.get(r.group)
        ratio = f"{r.ns / base:.2f}" if (base and r.ns is not None) else ""
        note = r.note.replace("|", "\\|")
        lines.append(f"| {r.group} | {name} | {_fmt_ns(r.ns)} | {ratio} | {note} |")
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
                    row["peers"].append({"name": peer, "ns": p.ns, "note": p.note})
        rows.append(row)
    return rows + _fraction_rows(results) + _handoff_rows(results)


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
                row["peers"].append({"name": reference_name, "ns": reference.ns,
                                     "note": reference.note})
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
               "peers": [{"name": r.name, "ns": r.ns, "note": r.note} for r in imports]}
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


def format_markdown(results: list[Measurement], env: dict, command: str, mode: str) -> str:
    """The whole results page: environment, budget table, one table per section."""
    by_section: dict[str, list[Measurement]] = {}
    for r in results:
        by_section.setdefault(r.section, []).append(r)
    machine = f"GPU machine ({env['gpu']})" if env.get("gpu") else "CPU machine"
    parts = [
        f"# Benchmark results: {machine}",
        f"Environment: {environment_line(env)}",
        f"Command: `{command}` ({mode} mode). Median ns per call; **bold** paths are "
        "interop-core's; \"× ours\" is the path's time divided by the first interop-core path "
        "of its operation (above 1: slower than us).",
        "## DESIGN.md budget\n\n" + format_budget(results),
    ]
    for section, rows in by_section.items():
        parts.append(f"## {SECTION_TITLES.get(section, section)}\n\n{format_section(rows)}")
    return "\n\n".join(parts) + "\n"


def plot(results: list[Measurement], path: str, title: str) -> None:
    """A PNG: log-scale ns per path, ours beside each peer, one panel per section.

    Raises
    ------
    ImportError
        When matplotlib is not installed (``pip install matplotlib``, or the ``bench`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install matplotlib (or "
                          "interop-core[bench])") from exc
    by_section: dict[str, list[Measurement]] = {}
    for r in results:
        if r.ns is not None and r.section != "import":
            by_section.setdefault(r.section, []).append(r)
    if not by_section:
        by_section = {"(no results)": []}
    heights = [max(len(rows), 3) * 0.22 + 0.8 for rows in by_section.values()]
    fig, axes = plt.subplots(len(heights), 1, figsize=(11, sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False,
                             layout="constrained")
    for ax, (section, rows) in zip(axes[:, 0], by_section.items(), strict=True):
        labels = [f"{r.group}  {r.name}" for r in rows]
        colors = ["#1f77b4" if r.ours else "#bbbbbb" for r in rows]
        ax.barh(range(len(rows)), [r.ns for r in rows], color=colors)
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(SECTION_TITLES.get(section, section), fontsize=9, loc="left")
        ax.grid(axis="x", which="both", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
        for i, r in enumerate(rows):
            ax.text(r.ns, i, f" {_fmt_ns(r.ns)}", va="center", fontsize=5)
    axes[-1, 0].set_xlabel("ns per call (log scale); blue: interop-core, grey: peers",
                           fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
