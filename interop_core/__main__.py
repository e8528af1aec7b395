"""python -m interop_core: a short tour of views over the frameworks installed here.

With no subcommand, each installed framework hands a tensor to interop-core; the demo prints the
view, proves it is zero-copy by writing through an export of it, and hands it on to the next
framework.  "plugins" lists the plugins interop-core knows of and their status; "doctor"
reports the Python, the frameworks and the CUDA driver and devices found here; "bench" times
interop-core beside every peer installed here (python -m interop_core bench --help).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import time

from . import StridedMemoryView, __version__

__all__ = ["REFERENCE_WIDTH", "build_parser", "main", "reference_markdown"]


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _demo_numpy() -> None:
    import numpy as np

    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView.from_any(array)
    print(f"numpy array {array.shape} {array.dtype}\n  -> {view}")
    column = view[:, 1]
    print(f"  view[:, 1] -> shape={column.shape} strides={column.strides} ptr={column.ptr:#x}")
    back = np.from_dlpack(view)
    back[0, 0] = 42.0
    print(f"  np.from_dlpack(view) shares memory: array[0, 0] is now {array[0, 0]}")
    frozen = array.copy()
    frozen.flags.writeable = False
    print(f"  read-only array -> readonly={StridedMemoryView.from_any(frozen).readonly}")


def _demo_torch() -> None:
    import torch

    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()
    view = StridedMemoryView.from_any(tensor)
    print(f"torch tensor {tuple(tensor.shape)} {tensor.dtype} (transposed)\n  -> {view}")
    assert view.ptr == tensor.data_ptr() and view.strides == tensor.stride()
    again = torch.from_dlpack(view)
    again[0, 0] = 7
    print(f"  torch.from_dlpack(view) shares memory: tensor[0, 0] is now {tensor[0, 0].item()}")
    if _installed("numpy"):
        import numpy as np

        floats = torch.linspace(0, 1, 5)
        as_numpy = np.asarray(StridedMemoryView.from_any(floats))
        print(f"  torch float32 -> numpy through the view: {as_numpy} "
              f"(same pointer: {as_numpy.ctypes.data == floats.data_ptr()})")


def _demo_jax() -> None:
    import jax.numpy as jnp

    array = jnp.arange(4.0)
    view = StridedMemoryView.from_any(array)
    print(f"jax array {array.shape} {array.dtype}\n  -> {view}")
    print(f"  jax arrays are immutable: readonly={view.readonly}")


def _demo() -> int:
    print(f"interop-core {__version__} on Python {sys.version.split()[0]}\n")
    demos = [("numpy", _demo_numpy), ("torch", _demo_torch), ("jax", _demo_jax)]
    for name, demo in demos:
        if not _installed(name):
            print(f"{name}: not installed, skipped\n")
            continue
        demo()
        print()
    from .handoff._matrix import format_matrix, handoff_matrix

    print("Handoff matrix: to(source, target) for every installed pair; each cell verified")
    print("zero-copy (same pointer) and by values, then timed (us per call) and divided by the")
    print("fastest of the target framework's own imports of the same source (budget: <= 1.0x)\n")
    print(format_matrix(*handoff_matrix()))
    return 0


# -- plugins ----------------------------------------------------------------------------------

_PLUGIN_FIELDS = ("name", "distribution", "version", "claims", "exporters", "status", "reason")


def _plugin_rows() -> list[dict]:
    from . import plugin_status

    return [{field: getattr(info, field) for field in _PLUGIN_FIELDS} for info in plugin_status()]


def _status_text(row: dict) -> str:
    return f"{row['status']}: {row['reason']}" if row["reason"] else row["status"]


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for row in (header, *rows):
        # The last column is left ragged so long claim lists do not pad every line.
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths[:-1], strict=True)]
        cells = [*padded, row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _autoload_note() -> str | None:
    from .plugins import DISABLE_AUTOLOAD_ENV

    value = os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower()
    if value not in ("", "0", "false", "no"):
        return f"plugin discovery is off ({DISABLE_AUTOLOAD_ENV}={os.environ[DISABLE_AUTOLOAD_ENV]})"
    return None


def _plugins(as_json: bool) -> int:
    rows = _plugin_rows()
    if as_json:
        print(json.dumps([{**row, "claims": list(row["claims"]),
                           "exporters": list(row["exporters"])} for row in rows], indent=2))
        return 0
    note = _autoload_note()
    if note:
        print(note)
    if not rows:
        print("no plugins found (entry-point group interop_core.plugins)")
        return 0
    header = ("NAME", "DISTRIBUTION", "VERSION", "STATUS", "TYPES")
    print(_table(header, [(row["name"], row["distribution"] or "-", row["version"] or "-",
                           _status_text(row), ", ".join(row["claims"]) or "-") for row in rows]))
    return 0


# -- doctor -----------------------------------------------------------------------------------

# (what to call it, the module to look for, distributions that may provide it).
_FRAMEWORKS = (
    ("torch", "torch", ("torch",)),
    ("cupy", "cupy", ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy-rocm-6-0")),
    ("jax", "jax", ("jax",)),
    ("jaxlib", "jaxlib", ("jaxlib",)),
    ("numba", "numba", ("numba",)),
    ("numpy", "numpy", ("numpy",)),
    ("ml_dtypes", "ml_dtypes", ("ml_dtypes", "ml-dtypes")),
    ("cuda.core", "cuda.core", ("cuda-core", "cuda_core")),
)


def _module_present(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (nor, for ``a.b``, ``a``)."""
    from importlib.machinery import PathFinder

    top, _, rest = name.partition(".")
    if top in sys.modules and not rest:
        return True
    spec = importlib.util.find_spec(top)
    for part in rest.split(".") if rest else ():
        if spec is None or spec.submodule_search_locations is None:
            return False
        spec = PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def _distribution_version(candidates: tuple[str, ...]) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in candidates:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _import_probe(module: str) -> dict:
    """Import ``module`` (only under ``doctor --import``) and say what it reports."""
    start = time.perf_counter()
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a broken install is what doctor is for: report it, go on
        return {"import": f"failed: {type(exc).__name__}: {exc}"}
    info = {"import": "ok", "import_ms": round((time.perf_counter() - start) * 1e3, 1),
            "module_version": getattr(mod, "__version__", None)}
    try:
        if module == "torch":
            info["cuda"] = mod.cuda.is_available()
        elif module == "jax":
            info["devices"] = [str(d) for d in mod.devices()]
    except Exception as exc:
        info["probe_error"] = f"{type(exc).__name__}: {exc}"
    return info


def _frameworks(do_import: bool) -> list[dict]:
    rows = []
    for label, module, candidates in _FRAMEWORKS:
        present = _module_present(module)
        row = {"name": label, "module": module, "installed": present,
               "version": _distribution_version(candidates) if present else None}
        if present and do_import:
            row.update(_import_probe(module))
        rows.append(row)
    return rows


def _cuda_info() -> dict:
    from .cuda import _cuda

    version = _cuda.driver_version()
    count = _cuda.device_count()
    return {"driver_version": version,
            "driver": None if version is None else f"{version // 1000}.{version % 1000 // 10}",
            "devices": [{"index": i, "name": _cuda.device_name(i)} for i in range(count)]}


def _plugin_summary() -> dict:
    try:
        rows = _plugin_rows()
    except Exception as exc:  # doctor still reports the rest when the registry cannot load
        return {"error": f"{type(exc).__name__}: {exc}", "count": 0, "by_status": {}}
    by_status: dict[str, int] = {}
    for row in rows:
        by_status[row["status"]] = by_status.get(row["status"], 0) + 1
    return {"count": len(rows), "by_status": by_status,
            "failed": {row["name"]: row["reason"] for row in rows if row["status"] == "failed"}}


def _reader_validations(do_import: bool) -> list[dict]:
    """Validation results of the fast readers and sharded paths (each validates on first use).

    Under ``--import`` the frameworks are imported already, so every type a plugin declared is
    resolved now, which runs each validation once (a sharded path's too); otherwise only what
    ran is reported.
    """
    from . import plugins
    from .registry import _validation
    from .shards import _shards

    if do_import:
        for info in plugins.plugin_status():
            for path in info.claims:
                module, _, qualname = path.partition(":")
                target = sys.modules.get(module)
                for part in qualname.split(".") if target is not None else ():
                    target = getattr(target, part, None)
                if isinstance(target, type):
                    plugins.reader_for(target)
                    _shards.sharded_entry_for(target)   # validates a declared sharded path
    return [{"type": r.type_path, "kind": r.kind, "plugin": r.plugin, "validated": r.validated,
             "reason": r.reason, "details": r.details} for r in _validation.results()]


def _triton_wrapper(do_import: bool) -> dict:
    """What interop_core.triton_kernel does here; under ``--import`` it validates itself now
    (on a GPU: Triton's own launch against the wrapper's, as on a first compile)."""
    from .launch import _triton

    if not do_import:
        return _triton.status()
    try:
        return _triton._validate_now()
    except Exception as exc:  # doctor reports a validation that cannot run, and goes on
        status = _triton.status()
        status["reason"] = f"validation could not run: {type(exc).__name__}: {exc}"
        return status


def _doctor_report(do_import: bool) -> dict:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        pluggy_version = version("pluggy")
    except PackageNotFoundError:
        pluggy_version = None
    return {
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable, "platform": platform.platform()},
        "interop_core": {"version": __version__,
                         "location": os.path.dirname(os.path.abspath(__file__)),
                         "pluggy": pluggy_version},
        "frameworks": _frameworks(do_import),
        "cuda": _cuda_info(),
        "plugins": _plugin_summary(),
        "readers": _reader_validations(do_import),
        "triton_wrapper": _triton_wrapper(do_import),
    }


def _print_doctor(report: dict, do_import: bool) -> None:
    py, core = report["python"], report["interop_core"]
    print(f"Python        {py['version']} ({py['implementation']}) {py['executable']}")
    print(f"platform      {py['platform']}")
    print(f"interop-core  {core['version']} ({core['location']})")
    print(f"pluggy        {core['pluggy'] or 'not installed'}")
    print("\nFrameworks" + ("" if do_import else " (not imported; --import to import them)"))
    for row in report["frameworks"]:
        if not row["installed"]:
            text = "not installed"
        else:
            text = row["version"] or "installed (version unknown)"
            if "import" in row:
                text += f"  import {row['import']}"
                if "import_ms" in row:
                    text += f" ({row['import_ms']} ms)"
                if "cuda" in row:
                    text += f", CUDA available: {row['cuda']}"
                if "devices" in row:
                    text += f", devices: {', '.join(row['devices'])}"
                if "probe_error" in row:
                    text += f", probe failed: {row['probe_error']}"
        print(f"  {row['name']:<11} {text}")
    cuda = report["cuda"]
    print("\nCUDA")
    if cuda["driver_version"] is None:
        print("  driver      not found (no libcuda, or cuInit failed: no usable device)")
    else:
        print(f"  driver      {cuda['driver']} ({cuda['driver_version']})")
        print(f"  devices     {len(cuda['devices'])}")
        for device in cuda["devices"]:
            print(f"    {device['index']}: {device['name']}")
    plugins = report["plugins"]
    print("\nPlugins")
    if "error" in plugins:
        print(f"  registry failed to load: {plugins['error']}")
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(plugins["by_status"].items()))
    print(f"  {plugins['count']} known" + (f": {counts}" if counts else ""))
    for name, reason in sorted(plugins["failed"].items()):
        print(f"  failed: {name}: {reason}")
    note = _autoload_note()
    if note:
        print(f"  {note}")
    print("  (python -m interop_core plugins for the full table)")
    triton = report["triton_wrapper"]
    if not triton["installed"]:
        state = "not installed"
    elif triton["mode"] == "fast":
        state = f"Triton {triton['version']}: validated, launches go through interop-core"
    elif triton["mode"] == "fallback":
        state = f"Triton {triton['version']}: FELL BACK to Triton's own launch"
    else:
        state = f"Triton {triton['version']}: not validated yet in this process"
    print(f"\nTriton wrapper  {state}")
    print(f"  {triton['reason']}")
    print("\nFast readers and sharded paths (validated once per process, on first use)")
    if not report["readers"]:
        print("  none validated yet" + ("" if do_import else " (--import validates them now)"))
    for row in report["readers"]:
        state = "validated" if row["validated"] else "FELL BACK"
        name = row["type"] if row["kind"] == "reader" else f"{row['type']} (shards)"
        print(f"  {name:<28} {state}: {row['reason']}")
        for key, value in row["details"].items():
            print(f"  {'':<28}   {key}: {value}")


def _doctor(do_import: bool, as_json: bool) -> int:
    report = _doctor_report(do_import)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_doctor(report, do_import)
    return 0


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    # The suite (and numpy, which it imports) loads only when ``bench`` runs.
    from .bench import add_arguments

    add_arguments(parser)


def build_parser(width: int | None = None) -> argparse.ArgumentParser:
    """The command line's parser, subcommands included.

    Parameters
    ----------
    width : int, optional
        Wrap help text at this many columns (the terminal's width when None); the reference
        in ``docs/cli.md`` is generated at a fixed width.

    Returns
    -------
    argparse.ArgumentParser
    """
    raw, formatter = argparse.RawDescriptionHelpFormatter, argparse.HelpFormatter
    if width is not None:
        raw = functools.partial(raw, width=width)
        formatter = functools.partial(formatter, width=width)
    parser = argparse.ArgumentParser(prog="python -m interop_core", description=__doc__,
                                     formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"interop-core {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{plugins,doctor,bench}")
    plugins = commands.add_parser("plugins", help="list plugins: types claimed, status",
                                  description="Every plugin interop-core knows of: its "
                                              "distribution, version, status and the types it "
                                              "claims.", formatter_class=formatter)
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    doctor = commands.add_parser("doctor", help="Python, frameworks, CUDA driver and devices",
                                 description="What a bug report needs: the Python, "
                                             "interop-core, the frameworks, the CUDA driver and "
                                             "devices, the plugins and the fast readers.",
                                 formatter_class=formatter)
    doctor.add_argument("--import", dest="do_import", action="store_true",
                        help="import each installed framework (slow) and report what it says")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    bench = commands.add_parser("bench", help="time interop-core beside every peer installed",
                                description="Time interop-core beside every peer installed "
                                            "here, in one process and run; print the results "
                                            "page (markdown) on stdout and the progress on "
                                            "stderr.", formatter_class=formatter)
    _bench_arguments(bench)
    return parser


#: The width the reference in docs/cli.md is wrapped at.
REFERENCE_WIDTH = 100


def reference_markdown() -> str:
    """The command-line reference of ``docs/cli.md``: every command's ``--help`` and the bench
    sections, generated from the parser (``python docs/cli_reference.py`` writes it there).

    Returns
    -------
    str
    """
    from .bench._report import SECTION_TITLES

    parser = build_parser(REFERENCE_WIDTH)
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["### `python -m interop_core --help`", "```text\n" + parser.format_help().strip()
             + "\n```"]
    for name, sub in commands.choices.items():
        parts += [f"### `python -m interop_core {name} --help`",
                  "```text\n" + sub.format_help().strip() + "\n```"]
    from .bench import SECTIONS

    rows = ["| section | what it measures |", "| --- | --- |"]
    rows += [f"| `{name}` | {SECTION_TITLES[name]} |" for name in SECTIONS]
    parts += ["### Bench sections (`--section NAME`)", "\n".join(rows)]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (``sys.argv[1:]`` when None). No subcommand runs the demo.

    Returns
    -------
    int
    """
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        from .bench import run_command

        return run_command(args)
    if args.command == "plugins":
        return _plugins(args.json)
    if args.command == "doctor":
        return _doctor(args.do_import, args.json)
    return _demo()


def _run() -> int:
    try:
        return main()
    except BrokenPipeError:
        # The reader of our output went away (`... --json | head`): nothing more to say, and
        # nothing to flush into the closed pipe at exit either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(_run())
