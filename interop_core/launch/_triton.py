"""Triton kernels on any framework's arrays, launched through the launch path.

``interop_core.triton_kernel(kernel)`` wraps a ``@triton.jit`` function.  Calls keep Triton's own
syntax (``fast[grid](x, y, out, n, BLOCK=1024)``).  The per-call path is compiled
(``_triton_launch``): bind the arguments, ``launch_args`` over them, the key of what Triton
specialises on, a dict lookup, one ``cuLaunchKernel`` on the compiled kernel's function handle.
This module holds what runs once: the first call of each key has Triton compile the kernel
(``JITFunction.run(..., warmup=True)`` on stand-ins carrying each array's pointer and dtype, so
Triton's own specialisation, cache and hooks decide), and its layout is checked; the first
compile in a process also validates this Triton version against Triton's own launch.  Anything
this path cannot do exactly as Triton does goes to Triton's own launch (arrays handed to it as
torch tensors): a Triton version whose compiled-kernel layout is not known here, a failed
validation (both for the rest of the process, with the reason in ``python -m interop_core
doctor``), launch hooks (a profiler), autotuned kernels, tuple or tensor-descriptor arguments.

Triton is imported only by :func:`triton_kernel` (and by doctor's ``--import``), never by
``import interop_core``.
"""

from __future__ import annotations

import warnings

from . import _triton_launch
from ._triton_launch import TritonKernel

__all__ = ["TritonKernel", "status", "triton_kernel"]

# Triton versions (major.minor) whose compiled kernels this wrapper knows how to launch: the
# parameter layout (every non-constexpr argument, then the global and profile scratch pointers),
# the metadata it reads (num_warps, num_ctas, shared, global_scratch_size / _align,
# profile_scratch_size / _align, launch_cooperative_grid, launch_pdl) and the launch Triton's
# launcher makes from them (grid x times num_ctas, 32 * num_warps threads, clusters of num_ctas
# spread, cooperative and PDL attributes).
KNOWN_LAYOUTS = ("3.6",)

_REQUIRED_METADATA = ("num_warps", "num_ctas", "shared", "global_scratch_size",
                      "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                      "launch_cooperative_grid", "launch_pdl")

# DLPack (code, bits) -> Triton's type name of an element, for the stand-ins Triton compiles
# from (torch's dtypes map to the same names in Triton).
_TRITON_DTYPES = {
    (0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64",
    (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64",
    (2, 16): "fp16", (2, 32): "fp32", (2, 64): "fp64", (4, 16): "bf16", (6, 8): "u1",
    (9, 8): "fp8e4b15", (10, 8): "fp8e4nv", (11, 8): "fp8e4b8", (12, 8): "fp8e5",
    (13, 8): "fp8e5b16",
}

# What the process decided (module-owned): None until the first compile validated Triton.
_state: dict = {"mode": None, "reason": "not used yet in this process", "triton": None}
_validating = False


def _import_triton():
    try:
        import triton
    except ImportError as exc:
        raise ImportError("interop_core.triton_kernel needs Triton: pip install triton") from exc
    return triton


def triton_kernel(kernel, *, writable=()):
    """Wrap a ``@triton.jit`` kernel to launch it on arrays of any framework.

    Parameters
    ----------
    kernel : triton.JITFunction
        The ``@triton.jit`` function (an autotuned or heuristics kernel is accepted too; its
        calls then always go through Triton's own launch, which does the tuning).
    writable : sequence of str
        Names of the parameters the kernel writes: a read-only array there (a jax array, a
        read-only numpy array or view) is refused with ``BufferError`` before anything runs.

    Returns
    -------
    TritonKernel
        ``fast[grid](*args, **kwargs)`` with Triton's call syntax; ``fast.run(*args, grid=,
        stream=, **kwargs)`` for another stream than torch's current one.

    Raises
    ------
    ImportError
        Where Triton is not installed (``pip install triton``).
    TypeError
        If ``kernel`` is not a Triton kernel, or ``writable`` is not a str or a sequence of
        str.
    ValueError
        If ``writable`` names something that is not a runtime parameter.
    """
    triton = _import_triton()
    from triton import knobs
    from triton.runtime.jit import JITFunction, KernelInterface

    if isinstance(writable, str):
        writable = (writable,)
    try:
        writable = tuple(writable)
    except TypeError:
        raise TypeError(f"triton_kernel(writable=...) takes parameter names (a str or a "
                        f"sequence of str), got {writable!r}") from None
    for name in writable:
        if not isinstance(name, str):
            raise TypeError(f"triton_kernel(writable=...) takes parameter names, got "
                            f"{name!r} ({type(name).__name__}) among {writable!r}")
    jit = kernel
    while not isinstance(jit, JITFunction) and isinstance(getattr(jit, "fn", None),
                                                          KernelInterface | JITFunction):
        jit = jit.fn
    if not isinstance(jit, JITFunction):
        raise TypeError(f"triton_kernel needs a @triton.jit kernel, got {type(kernel).__name__}")
    names, modes, flags, defaults = [], bytearray(), bytearray(), []
    for param in jit.params:
        names.append(param.name)
        defaults.append(param.default if param.has_default else _triton_launch._NO_DEFAULT)
        if param.is_constexpr:
            modes.append(1)
            flags.append(0)
            continue
        modes.append(2)
        bits = 0 if param.do_not_specialize else 1
        bits |= 0 if param.do_not_specialize_on_alignment else 2
        annotation = param.annotation_type
        if annotation:
            bits |= 4
            if annotation == "u1" or annotation[:2] in ("fp", "bf"):
                bits |= 8
        flags.append(bits)
    from triton.backends.nvidia.compiler import CUDAOptions

    state = _version_state(triton.__version__)
    return _triton_launch._new_kernel(
        kernel, jit.__name__, tuple(names), bytes(modes), bytes(flags), tuple(defaults),
        writable, frozenset(CUDAOptions.__dataclass_fields__), _prepare, _compile, _own_launch,
        knobs.runtime, knobs.compilation,
        kernel is not jit or state is not None)


def _version_state(version: str) -> str | None:
    """None where this wrapper knows the version's layout; else the reason it does not."""
    major_minor = ".".join(version.split(".")[:2])
    if major_minor in KNOWN_LAYOUTS:
        return None
    reason = (f"Triton {version}: its compiled-kernel layout is not known to interop-core "
              f"(known: {', '.join(KNOWN_LAYOUTS)}); every launch is Triton's own")
    _fall_back(reason, version)
    return reason


def _fall_back(reason: str, version: str | None = None) -> None:
    _state.update(mode="fallback", reason=reason)
    if version is not None:
        _state["triton"] = version
    _triton_launch._set_process_mode(2)


def status() -> dict:
    """What the Triton wrapper does in this process (for ``python -m interop_core doctor``).

    Returns
    -------
    dict
        ``installed`` (bool), ``version`` (str or None), ``layout_known`` (bool),
        ``mode`` (``None`` before the first compile, ``"fast"`` once validated, ``"fallback"``
        when every launch is Triton's own) and ``reason`` (one line).
    """
    import importlib.metadata

    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return {"installed": False, "version": None, "layout_known": False, "mode": None,
                "reason": "Triton is not installed (pip install triton)"}
    known = ".".join(version.split(".")[:2]) in KNOWN_LAYOUTS
    reason = _state["reason"]
    if _state["mode"] is None:
        reason = ("layout known; validated against Triton's own launch on the first compile"
                  if known else f"Triton {version}: its compiled-kernel layout is not known to "
                  f"interop-core (known: {', '.join(KNOWN_LAYOUTS)}); launches would be "
                  "Triton's own")
    return {"installed": True, "version": version, "layout_known": known,
            "mode": _state["mode"], "reason": reason}


# -- the first call ------------------------------------------------------------------------------

def _prepare(k: TritonKernel) -> None:
    # Triton's driver (torch, its CUDA utilities) up, and the functions it takes its device and
    # stream from: torch's current device and current raw stream.
    import torch
    from triton.runtime.driver import driver

    active = driver.active
    torch.cuda.current_device()                 # initialises torch's CUDA state once
    _triton_launch._set_device_functions(k, torch._C._cuda_getDevice, active.get_current_stream)


class _Pointer:
    """A stand-in for an array argument while Triton compiles: what Triton's specialisation
    reads of a tensor (its data pointer, for the alignment, and its dtype)."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: str):
        self._ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self._ptr


def _triton_dtype(view) -> str:
    code, bits, lanes = view.dlpack_dtype
    name = _TRITON_DTYPES.get((code, bits)) if lanes == 1 else None
    if name is None:
        raise TypeError(f"Triton has no element type for the DLPack dtype {view.dlpack_dtype} "
                        f"({view.dtype})")
    return name


def _standins(k: TritonKernel, record, args: tuple, kwargs: dict):
    args, kwargs = list(args), dict(kwargs)
    for j, name in enumerate(k.runtime_names):
        if record.args[j] is None or record.scalar_type(j) is not None:
            continue                            # a scalar or None: passed as it is
        view = record.views[j]
        standin = _Pointer(view.ptr, _triton_dtype(view))
        position = k.names.index(name)
        if position < len(args):
            args[position] = standin
        else:
            kwargs[name] = standin
    return args, kwargs


def _compile(k: TritonKernel, key, record, grid, args: tuple, kwargs: dict, device: int):
    """A key seen for the first time: Triton compiles it; returns what the wrapper launches."""
    global _validating
    if _state["mode"] is None and not _validating:
        _validating = True
        try:
            _validate(device)
        finally:
            _validating = False
    if _state["mode"] == "fallback":
        return _triton_launch._own_marker()
    standin_args, standin_kwargs = _standins(k, record, args, kwargs)
    compiled = _warmup(k, standin_args, standin_kwargs, grid)
    if compiled is None:                        # a jit_cache_hook took over: Triton's way
        return _triton_launch._own_marker()
    entry, problem, process_wide = _entry_for(k, compiled, record, device)
    if problem is None:
        return entry
    if process_wide:
        _fall_back(problem)
    k.reasons[key] = problem
    return _triton_launch._own_marker()


def _warmup(k: TritonKernel, args: list, kwargs: dict, grid):
    """Triton compiles (or finds in its caches) the kernel for these arguments, exactly as
    ``kernel[grid](...)`` would, without launching it."""
    compiled = k.fn.run(*args, grid=grid, warmup=True, **kwargs)
    if compiled is not None and hasattr(compiled, "result"):    # Triton's async compile mode
        compiled = compiled.result()
    return compiled


def _load_function(compiled, device: int) -> int:
    """Triton loads the compiled module on the current device; its CUfunction handle."""
    compiled._init_handles()
    return compiled.function


def _expected_type(record, j: int, flags: int) -> str | None:
    """The type Triton's specialisation gives runtime argument j (None: any; for checks)."""
    value = record.args[j]
    scalar = record.scalar_type(j)
    if flags & 4:                               # annotated: the annotation decides
        return None
    if value is None:
        return "constexpr"
    if scalar is None:
        return "*"
    if scalar == "bool":
        return "u1"
    if scalar == "float64":
        return "fp32"
    if value == 1 and flags & 1:
        return "constexpr"
    if scalar == "uint64":
        return "u64"
    return "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"


def layout_of(k: TritonKernel, compiled, record) -> tuple[tuple | None, str | None, bool]:
    """The layout of ``compiled`` for the arguments in ``record``, checked, without a driver.

    Returns
    -------
    (types, problem, process_wide)
        ``types``: Triton's type of each runtime argument (``"constexpr"`` for those this
        specialisation leaves out).  ``problem``: why the wrapper cannot launch it (then
        ``types`` is None); ``process_wide``: the problem says this Triton version is not
        what the wrapper knows (every launch then goes to Triton's own).
    """
    md = compiled.metadata
    missing = [f for f in _REQUIRED_METADATA if not hasattr(md, f)]
    if missing:
        return None, (f"Triton's compiled kernels lack {', '.join(missing)}: a layout "
                      "interop-core does not know; every launch is Triton's own"), True
    if getattr(md, "tensordesc_meta", None):
        return None, "tensor-descriptor arguments: launched by Triton", False
    signature = compiled.src.signature
    types = []
    flags = k.parameter_flags
    for j, name in enumerate(k.runtime_names):
        ty = signature.get(name)
        if not isinstance(ty, str) or ty.startswith(("tensordesc", "nvTmaDesc")):
            return None, f"argument {name!r} has the Triton type {ty!r}: launched by Triton", False
        expected = _expected_type(record, j, flags[k.names.index(name)])
        if expected is not None and not (ty == expected or (expected == "*"
                                                             and ty.startswith("*"))):
            return None, (f"Triton {_state['triton']} specialised argument {name!r} "
                          f"({record.args[j]!r}) as {ty!r} where interop-core's key policy "
                          f"expects {expected!r}; every launch is Triton's own"), True
        types.append(ty)
    if md.num_ctas > 8:
        return None, f"a cluster of {md.num_ctas} CTAs (non-portable): launched by Triton", False
    return tuple(types), None, False


def _entry_for(k: TritonKernel, compiled, record, device: int):
    from ..cuda import _module

    types, problem, process_wide = layout_of(k, compiled, record)
    if problem is not None:
        return None, problem, process_wide
    function = _load_function(compiled, device)
    md = compiled.metadata
    sizes = _triton_launch._storage_sizes(types) + (8, 8)
    reported = _module._function_param_sizes(function, device)
    if reported is not None and reported != sizes:
        return None, (f"the parameter layout of {k.name} ({sizes}) differs from what the driver "
                      f"reports ({reported}); every launch is Triton's own"), True
    layout = tuple(t for t in types if t != "constexpr") + ("global_scratch", "profile_scratch")
    entry = _triton_launch._new_compiled(
        compiled, function, device, md.num_warps, md.num_ctas, md.shared,
        bool(md.launch_cooperative_grid), bool(md.launch_pdl), types, layout,
        md.global_scratch_size, md.global_scratch_align, md.profile_scratch_size,
        md.profile_scratch_align)
    return entry, None, False


def _validate(device: int) -> None:
    """Once per process: this Triton's launch against ours, on a canary kernel."""
    import triton

    _state["triton"] = triton.__version__
    if _version_state(triton.__version__) is not None:
        return
    try:
        from . import _triton_canary

        problem = _triton_canary.compare(triton_kernel)
    except Exception as exc:   # a canary that cannot run says the path is not safe here
        problem = f"the validation kernel failed: {type(exc).__name__}: {exc}"
    if problem is not None:
        _fall_back(f"Triton {triton.__version__}: {problem}; every launch is Triton's own")
        return
    _state.update(mode="fast", reason=(
        f"Triton {triton.__version__}: results and parameter layout of the validation kernels "
        "equal Triton's own launch"))
    _triton_launch._set_process_mode(1)


def _validate_now() -> dict:
    """Run the validation in this process (doctor --import, where a GPU is present)."""
    global _validating
    if _state["mode"] is None:
        _validating = True
        try:
            import torch

            if not torch.cuda.is_available():
                found = status()
                found["reason"] += " (no CUDA GPU here to validate on now)"
                return found
            _validate(torch.cuda.current_device())
        finally:
            _validating = False
    return status()


# -- Triton's own launch -------------------------------------------------------------------------

def _own_launch(k: TritonKernel, grid, args: tuple, kwargs: dict, stream):
    """Triton's ``kernel[grid](...)``, every array handed over as a torch tensor."""
    import torch

    if k.writable_names:
        _refuse_read_only(k, args, kwargs)
    if stream is None:
        handle = torch.cuda.current_stream().cuda_stream
    else:
        from ..cuda._streams import resolve_consumer_stream

        handle = resolve_consumer_stream(stream)
    converted = tuple(_as_torch(a, handle, torch) for a in args)
    converted_kwargs = {name: _as_torch(v, handle, torch) for name, v in kwargs.items()}
    if stream is None:
        return k.fn[grid](*converted, **converted_kwargs)
    with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
        return k.fn[grid](*converted, **converted_kwargs)


def _refuse_read_only(k: TritonKernel, args: tuple, kwargs: dict) -> None:
    from .. import view

    for name in k.writable_names:
        position = k.names.index(name)
        value = args[position] if position < len(args) else kwargs.get(name)
        if value is None or isinstance(value, (bool, int, float)):
            continue
        if view(value).readonly:
            raise BufferError(f"{k.name}: argument {name!r} ({type(value).__module__}."
                              f"{type(value).__qualname__}) is read-only, but the kernel "
                              "writes it")


def _as_torch(value, stream: int, torch):
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor, torch.dtype)):
        return value
    if isinstance(value, tuple):
        return tuple(_as_torch(v, stream, torch) for v in value)
    if type(value).__module__.startswith("triton"):
        return value                            # constexprs, dtypes, descriptors: Triton's own
    from .. import to
    from ..plugins import ReadOnlyHandoffWarning

    with warnings.catch_warnings():
        # Triton takes read-only memory as any other (the wrapper's writable= refuses it
        # where the kernel writes); the handoff's warning says nothing new here.
        warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
        return to(value, "torch", stream=stream)
