"""``python -m interop_core bench``: interop-core's per-call costs beside every peer installed.

One suite, run in one process so that ours and the peers see the same machine state:
``view()`` without synchronisation and with a consumer stream, ``to()`` for every pair of
frameworks, ``@viewable`` launchers of 1, 4 and 16 tensors, cost against ndim (1 to 64) and
against threads (1 to 8), the dispatch overhead measured in C, and ``import interop_core``.
Peers are measured whenever installed: cuda.core ``StridedMemoryView``, tvm-ffi
``from_dlpack``, the frameworks' own ``__dlpack__`` / ``from_dlpack`` /
``__cuda_array_interface__``, ``numba.cuda.as_cuda_array``, ``cupy.asarray``.

The harness (``interop_core.bench._harness``) warms each path up, calibrates a batch length,
and reports the median of several batches, taken in turn with the other paths of the same
operation.  Nothing here is imported by ``import interop_core``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ._cases import SECTIONS, build_cases, run_group
from ._harness import FAILED, FULL, NOT_APPLICABLE, OK, QUICK, STATUSES, Measurement, Progress
from ._report import environment, format_markdown, machine_label, plot

__all__ = ["SECTIONS", "Measurement", "add_arguments", "run", "run_command", "summary"]


def run(device: str = "all", quick: bool = False, sections: list[str] | None = None,
        progress: bool = True) -> list[Measurement]:
    """Run the suite on what is installed here.

    Parameters
    ----------
    device : {"all", "cpu", "cuda"}
        Host objects, CUDA objects, or both (CUDA only where a device is present).
    quick : bool
        A smoke run: short batches, fewer repeats (numbers are indicative only).
    sections : list of str, optional
        A subset of :data:`SECTIONS`; all of them when None.
    progress : bool
        Report progress on stderr.

    Returns
    -------
    list of Measurement
        One per path, failed and not-applicable paths included (``ns`` None, ``status`` says
        which, the error or the reason in ``note``).
    """
    settings = QUICK if quick else FULL
    if progress:
        print("interop-core bench: finding frameworks and peers ...", file=sys.stderr, flush=True)
    cases = build_cases(device, quick, sections)
    bar = Progress(len(cases), enabled=progress)
    results = []
    try:
        for group in _operations(cases):
            for case in group:
                bar.step(case.section, case.group, case.name)
            results += run_group(group, settings)
    finally:
        bar.close()
    return results


def _operations(cases: list) -> list[list]:
    """Consecutive cases of the same section and group: the paths timed against each other."""
    groups: list[list] = []
    for case in cases:
        if groups and (groups[-1][0].section, groups[-1][0].group) == (case.section, case.group):
            groups[-1].append(case)
        else:
            groups.append([case])
    return groups


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` subcommand's options."""
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: short batches, indicative numbers only")
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all",
                        help="host objects, CUDA objects, or both where a GPU is present "
                             "(default: all)")
    parser.add_argument("--section", action="append", choices=list(SECTIONS),
                        help="run only this section (repeatable; default: all)")
    parser.add_argument("--json", metavar="FILE", help="write the results and environment as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the results page as markdown")
    parser.add_argument("--plot", metavar="FILE",
                        help="write the headline chart (ours / the fastest peer per budget "
                             "line) to FILE and one chart per section beside it "
                             "(FILE-SECTION.png); needs matplotlib")
    parser.add_argument("--no-progress", action="store_true", help="no progress on stderr")


def _command_line(args: argparse.Namespace) -> str:
    parts = ["python -m interop_core bench"]
    if args.quick:
        parts.append("--quick")
    parts.append(f"--device {args.device}")
    for section in args.section or ():
        parts.append(f"--section {section}")
    return " ".join(parts)


def run_command(args: argparse.Namespace) -> int:
    """Run ``bench`` with parsed arguments; returns the exit code."""
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            # Said before the run, not after minutes of it.
            print("bench: --plot needs matplotlib, which is not installed here: "
                  "pip install matplotlib (or the interop-core[bench] extra)", file=sys.stderr)
            return 2
    from ._cases import _cuda_present

    if args.device == "cuda" and not _cuda_present():
        print("bench: --device cuda, but no CUDA device was found here (no libcuda or no "
              "device): only the device-independent sections run", file=sys.stderr)
    start = time.perf_counter()
    results = run(args.device, args.quick, args.section, progress=not args.no_progress)
    env = environment()
    mode = "quick" if args.quick else "full"
    charts: dict[str, str] = {}
    if args.plot:
        title = (f"interop-core {env['versions']['interop_core']}, {machine_label(env)}, "
                 f"{env['date']}" + (" (quick run)" if args.quick else ""))
        charts = plot(results, args.plot, title)
        if args.markdown:       # the page shows the charts, named relative to itself
            here = os.path.dirname(os.path.abspath(args.markdown))
            charts = {k: os.path.relpath(os.path.abspath(v), here) for k, v in charts.items()}
    page = format_markdown(results, env, _command_line(args), mode, charts=charts)
    print(page)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(page)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "command": _command_line(args), "mode": mode,
                       "results": [r.as_dict() for r in results]}, f, indent=1)
    print(f"bench: {summary(results, time.perf_counter() - start)}", file=sys.stderr)
    return 0


def summary(results: list[Measurement], seconds: float | None = None) -> str:
    """``"162 paths in 22 s: 160 timed, 2 not applicable, 0 failed"``, then what did not run.

    A path that cannot run on this machine (a peer's CUDA-only interface of a host object) is
    counted apart from a path that failed, and each kind is listed with its reason.

    Parameters
    ----------
    results : list of Measurement
    seconds : float, optional
        How long the run took.

    Returns
    -------
    str
    """
    counts = {status: [r for r in results if r.status == status] for status in STATUSES}
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    text = (f"{len(results)} paths{took}: {len(counts[OK])} timed, "
            f"{len(counts[NOT_APPLICABLE])} not applicable, {len(counts[FAILED])} failed")
    for status in (NOT_APPLICABLE, FAILED):
        for r in counts[status]:
            text += f"\n  {status}: {r.group}: {r.name}: {r.note}"
    return text
