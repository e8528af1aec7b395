"""The Triton wrapper's key policy, on the CPU: one key per specialisation Triton makes.

``TritonKernel.key(*args, **kwargs)`` is the key the wrapper files a call under.  Triton's own
decision for the same call is what its ``JITFunction`` computes: the binder that
``create_function_from_signature`` builds (``native_specialize_impl`` per argument) gives the
specialisation, and Triton caches compiled kernels by it and the options.  Two calls must get
equal keys exactly when Triton's decisions are equal, for pointers (dtype, 16-byte alignment),
integers (equal to 1, divisible by 16, 32 / 64 bits, unsigned), floats, bools, ``None``,
constexprs, launch options, ``do_not_specialize``, ``do_not_specialize_on_alignment`` and
annotated parameters.  Skips without Triton.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

triton = pytest.importorskip("triton", reason="needs Triton (pip install triton)")
torch = pytest.importorskip("torch", reason="needs torch (Triton's kernels take its tensors)")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

import interop_core  # noqa: E402


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["y_ptr"])
def scaled(x_ptr, y_ptr, out_ptr, n, scale, flag, bias_ptr, BLOCK: tl.constexpr = 64):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(x_ptr + offsets, mask=mask) * scale + tl.load(y_ptr + offsets, mask=mask)
    if flag:
        y = -y
    if bias_ptr is not None:
        y += tl.load(bias_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, y, mask=mask)


@triton.jit
def typed(x_ptr: tl.pointer_type(tl.float32), out_ptr, n: tl.int64, alpha: tl.float32,
          BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * alpha, mask=mask)


BACKEND = make_backend(GPUTarget("cuda", 90, 32))
BUFFER = torch.zeros(256)
INTS = [1, 0, 16, 17, -16, -1, 2 ** 31 - 1, 2 ** 31, 2 ** 32, -2 ** 31, -2 ** 31 - 1,
        2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]
POINTERS = [BUFFER, BUFFER[1:], BUFFER[4:], BUFFER[8:], torch.zeros(8, dtype=torch.float16),
            torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.bool)]


def tritons_decision(jit, args, kwargs):
    """What Triton's JITFunction caches a call under: (specialisation, options)."""
    binder = create_function_from_signature(jit.signature, jit.params, BACKEND)
    try:
        _, specialization, options = binder(*args, **kwargs)
    except Exception as exc:     # Triton refuses the call: so must the wrapper
        return ("refused", type(exc).__name__)
    return (tuple(specialization), str(options))


def ours(fast, args, kwargs):
    try:
        return fast.key(*args, **kwargs)
    except Exception as exc:
        return ("refused", type(exc).__name__)


def _calls(kernel):
    if kernel is add:
        calls = [((p, BUFFER, BUFFER, n), {"BLOCK": 64}) for p in POINTERS for n in INTS]
        calls += [((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": block}) for block in (64, 128)]
        calls += [((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": 64, "num_warps": w}) for w in (4, 8)]
        calls += [((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": 64, "num_stages": 2})]
        calls += [((BUFFER, BUFFER, BUFFER, n), {"BLOCK": 64}) for n in (1.5, True, None)]
        return calls
    if kernel is scaled:
        calls = [((BUFFER, p, BUFFER, n, 1.5, True, None), {}) for p in POINTERS for n in INTS]
        calls += [((BUFFER, BUFFER, BUFFER, 7, s, f, b), {})
                  for s in (0.5, 2.0, np.float64(3.0), 3, 16)
                  for f in (True, False)
                  for b in (None, BUFFER, BUFFER[1:])]
        calls += [((BUFFER, BUFFER, BUFFER, 7, 1.0, True, None), {"BLOCK": block})
                  for block in (32, 64)]
        return calls
    return [((p, BUFFER, n, a), {"BLOCK": 32}) for p in POINTERS[:4] for n in INTS[:8]
            for a in (1.0, 2.5, 3)]


@pytest.mark.parametrize("kernel", [add, scaled, typed], ids=["plain", "do-not-specialize",
                                                             "annotated"])
def test_calls_get_equal_keys_exactly_when_triton_makes_the_same_specialisation(kernel):
    fast = interop_core.triton_kernel(kernel)
    calls = _calls(kernel)
    keys = [ours(fast, a, kw) for a, kw in calls]
    decisions = [tritons_decision(kernel, a, kw) for a, kw in calls]
    disagreements = [(calls[i], calls[j]) for i, j in itertools.combinations(range(len(calls)), 2)
                     if (keys[i] == keys[j]) != (decisions[i] == decisions[j])]
    assert disagreements == []
    # The policy is not trivially coarse: the calls span many specialisations.
    assert len(set(map(str, decisions))) >= 6


def test_the_same_arguments_from_any_framework_give_the_same_key():
    fast = interop_core.triton_kernel(add)
    a = np.zeros(64, np.float32)
    t = torch.from_numpy(a)
    by_torch = fast.key(t, t, t, 100, BLOCK=64)
    assert fast.key(a, a, a, 100, BLOCK=64) == by_torch
    assert fast.key(interop_core.view(a), t, a, 100, BLOCK=64) == by_torch
    assert fast.key(a[1:], t, t, 100, BLOCK=64) != by_torch            # unaligned pointer
    assert fast.key(t, t, t, n=100, BLOCK=64) == by_torch               # by name
    assert fast.key(t, t, t, 100, BLOCK=64).policy == "triton"


def test_launch_options_in_any_keyword_order_give_one_key():
    fast = interop_core.triton_kernel(add)
    one = fast.key(BUFFER, BUFFER, BUFFER, 5, BLOCK=64, num_warps=8, num_stages=2)
    assert fast.key(BUFFER, BUFFER, BUFFER, 5, num_stages=2, BLOCK=64, num_warps=8) == one
    assert fast.key(BUFFER, BUFFER, BUFFER, 5, BLOCK=64, num_warps=8) != one


def test_triton_debug_mode_is_part_of_the_key():
    fast = interop_core.triton_kernel(add)
    plain = fast.key(BUFFER, BUFFER, BUFFER, 5, BLOCK=64)
    assert fast.key(BUFFER, BUFFER, BUFFER, 5, BLOCK=64, debug=True) != plain
    saved = triton.knobs.runtime.debug
    triton.knobs.runtime.debug = True
    try:
        assert fast.key(BUFFER, BUFFER, BUFFER, 5, BLOCK=64) != plain
    finally:
        triton.knobs.runtime.debug = saved


def test_float_constexprs_are_keyed_by_their_bits():
    @triton.jit
    def shift(out_ptr, SHIFT: tl.constexpr):
        tl.store(out_ptr, SHIFT)

    fast = interop_core.triton_kernel(shift)
    keys = {str(fast.key(BUFFER, SHIFT=v).words) for v in (0.0, -0.0, 1.0, 1, 2.5, "a", None)}
    assert len(keys) == 7


BAD_CALLS = {
    "missing-argument": (((BUFFER, BUFFER, BUFFER), {"BLOCK": 64}), TypeError,
                         "add() missing a required argument: 'n'"),
    "too-many": (((BUFFER,) * 6, {}), TypeError, "add() takes 5 arguments but 6 were given"),
    "twice": (((BUFFER, BUFFER, BUFFER, 5), {"n": 5, "BLOCK": 64}), TypeError,
              "add() got multiple values for argument 'n'"),
    "unknown-keyword": (((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": 64, "nmu_warps": 4}), KeyError,
                        "Keyword argument nmu_warps was specified but unrecognised"),
    "stream-keyword": (((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": 64, "stream": 0}), TypeError,
                       "add: stream= is not a kernel argument"),
    "unhashable-constexpr": (((BUFFER, BUFFER, BUFFER, 5), {"BLOCK": [64]}), TypeError,
                             "add: constexpr 'BLOCK'=[64] is not hashable"),
    "not-viewable": (((BUFFER, "text", BUFFER, 5), {"BLOCK": 64}), TypeError,
                     "add: argument 'y_ptr' (str) is not a scalar"),
    "read-only-output": (((BUFFER, BUFFER, np.zeros(4, np.float32)[::-1].copy().view(),
                           5), {"BLOCK": 64}), BufferError, None),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_calls_are_clear_errors(case):
    (args, kwargs), error, message = BAD_CALLS[case]
    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    if case == "read-only-output":
        args[2].flags.writeable = False
        message = "add: argument 'out_ptr' (numpy.ndarray) is read-only, but the kernel writes it"
    with pytest.raises(error) as caught:
        fast.key(*args, **kwargs)
    assert message in str(caught.value)


def test_writable_must_name_runtime_parameters():
    with pytest.raises(ValueError, match="writable names \\['BLOCK'\\], which are not runtime"):
        interop_core.triton_kernel(add, writable=("BLOCK",))
    with pytest.raises(TypeError, match="needs a @triton.jit kernel, got function"):
        interop_core.triton_kernel(lambda: None)


@pytest.mark.parametrize("writable", [5, True, None, ("out_ptr", 3)])
def test_writable_that_is_not_names_is_a_type_error_naming_it(writable):
    with pytest.raises(TypeError, match=r"triton_kernel\(writable=...\) takes parameter names"):
        interop_core.triton_kernel(add, writable=writable)


def _fresh(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_wrapper_imports_triton_only_when_a_kernel_is_wrapped():
    out = _fresh("""
        import json, sys
        import interop_core
        before = "triton" in sys.modules
        wrapper = interop_core.triton_kernel, interop_core.TritonKernel
        after_lookup = "triton" in sys.modules
        print(json.dumps({"before": before, "after_lookup": after_lookup}))
    """)
    assert out == {"before": False, "after_lookup": False}


def test_without_triton_the_wrapper_says_how_to_install_it():
    out = _fresh("""
        import json, sys
        sys.modules["triton"] = None          # Triton cannot be imported here
        import interop_core
        try:
            interop_core.triton_kernel(object())
        except ImportError as exc:
            print(json.dumps({"error": str(exc)}))
    """)
    assert out == {"error": "interop_core.triton_kernel needs Triton: pip install triton"}


def test_tritons_own_launch_path_refuses_read_only_outputs_too():
    from interop_core.launch import _triton

    fast = interop_core.triton_kernel(add, writable=("out_ptr",))
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(BufferError, match="add: argument 'out_ptr' \\(numpy.ndarray\\) is "
                                          "read-only, but the kernel writes it"):
        _triton._own_launch(fast, (1,), (BUFFER, BUFFER, frozen, 16), {"BLOCK": 64}, None)
