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
import sys
import time

from ._cases import SECTIONS, build_cases, run_group
from ._harness import FULL, QUICK, Measurement, Progress
from ._report import environment, format_markdown, plot

__all__ = ["SECTIONS", "Measurement", "add_arguments", "run", "run_command"]


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
        One per path, failed paths included (``ns`` None, the error in ``note``).
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
    parser.add_argument("--plot", metavar="FILE", help="write a PNG bar chart (needs matplotlib)")
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
    page = format_markdown(results, env, _command_line(args), mode)
    print(page)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(page)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "command": _command_line(args), "mode": mode,
                       "results": [r.as_dict() for r in results]}, f, indent=1)
    if args.plot:
        title = f"interop-core bench ({mode}): {env['gpu'] or env['cpu']}"
        plot(results, args.plot, title)
    failed = sum(r.ns is None for r in results)
    print(f"bench: {len(results)} paths in {time.perf_counter() - start:.0f} s, "
          f"{failed} failed (listed in the tables)", file=sys.stderr)
    return 0
