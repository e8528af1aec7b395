"""The conformance kit: a base class whose inherited tests check one plugin end to end."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from dataclasses import dataclass

import pytest

import interop_core

__all__ = ["REQUIRED_SAMPLES", "Expected", "PluginConformance"]

#: Sample names every :meth:`PluginConformance.make_samples` must return.
REQUIRED_SAMPLES = ("contiguous", "sliced", "transposed", "zero_size", "zero_d")

#: Marker put on every kit test (registered by the kit's pytest plugin).
_MARKER = "interop_core_conformance"

#: Run in a fresh interpreter: load the plugin, report its status and the frameworks imported.
_LOAD_SCRIPT = r"""
import json, sys
sys.path[:0] = [p for p in json.loads(sys.argv[1]) if p not in sys.path]
name, module, frameworks = sys.argv[2], sys.argv[3] or None, json.loads(sys.argv[4])
preloaded = sorted(m for m in frameworks if m in sys.modules)
import interop_core, interop_core.plugins
if module:
    import importlib
    interop_core.register_plugin(importlib.import_module(module), name=name)
else:
    interop_core.plugins.discover()
info = [i for i in interop_core.plugin_status() if i.name == name]
print(json.dumps({
    "preloaded": preloaded,
    "imported": sorted(m for m in frameworks if m in sys.modules),
    "found": bool(info),
    "status": info[0].status if info else None,
    "reason": info[0].reason if info else None,
    "known": sorted(i.name for i in interop_core.plugin_status()),
}))
"""


@dataclass(frozen=True)
class Expected:
    """What the framework itself says about one sample (the truth a view is checked against).

    Parameters
    ----------
    ptr : int
        Address of element 0, from the framework's own API (e.g. ``tensor.data_ptr()``).
    shape : tuple of int
        Extent of each dimension.
    strides : tuple of int
        Stride of each dimension in ELEMENTS (divide byte strides by the itemsize).
    dtype : tuple of int
        DLPack ``(code, bits, lanes)``, e.g. ``(2, 32, 1)`` for float32.
    device : tuple of int, optional
        DLPack ``(device_type, device_id)``; ``(1, 0)`` (host memory) by default.
    readonly : bool, optional
        Whether the framework forbids writes to this sample.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: tuple[int, int, int]
    device: tuple[int, int] = (1, 0)
    readonly: bool = False


def _fail(message: str):
    pytest.fail(message, pytrace=False)


@pytest.mark.interop_core_conformance
class PluginConformance:
    """Base class of a plugin's conformance tests; subclass it in a ``test_*.py`` module.

    The subclass's name must start with ``Test`` so that pytest collects it.  It inherits the
    ``test_*`` methods below, each parametrised over the samples where that makes sense.

    Attributes
    ----------
    plugin_name : str
        The plugin's registered name (its ``interop_core.plugins`` entry-point name).
    framework_modules : tuple of str
        Modules that loading the plugin must not import (the framework and its heavy parts).
    exporter_target : str or None
        The exporter name the plugin registers (``interop_core.to(view, exporter_target)``);
        ``None`` skips the round-trip test.
    plugin_module : str or None
        For a plugin without an entry point: the module to register by hand with
        :func:`interop_core.register_plugin` in the import check.  ``None`` (the default) loads
        the plugin through entry-point discovery, as users get it.

    Notes
    -----
    The subclass implements :meth:`make_samples` and :meth:`expected`.  Samples are made afresh
    for each test, so a test may drop all references to them (the lifetime test does).
    """

    plugin_name: str = None
    framework_modules: tuple[str, ...] = ()
    exporter_target: str | None = None
    plugin_module: str | None = None

    # --- what the plugin author implements --------------------------------------------------

    def make_samples(self) -> dict[str, object]:
        """Fresh framework objects to view, by name.

        Returns
        -------
        dict of str to object
            Must hold at least the keys of :data:`REQUIRED_SAMPLES`: ``"contiguous"``,
            ``"sliced"`` (a strided sub-range, e.g. every other element), ``"transposed"``,
            ``"zero_size"`` (a dimension of extent 0) and ``"zero_d"`` (a 0-d tensor).  More keys
            are checked too.
        """
        raise NotImplementedError

    def expected(self, obj) -> Expected:
        """The framework's own metadata of one sample.

        Parameters
        ----------
        obj : object
            One of the samples.

        Returns
        -------
        Expected
        """
        raise NotImplementedError

    # --- plumbing -----------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc):
        """Parametrise the kit's per-sample tests over the sample names (a pytest class hook).

        Parameters
        ----------
        metafunc : pytest.Metafunc
        """
        if "sample" not in metafunc.fixturenames:
            return
        names = list(REQUIRED_SAMPLES)
        try:
            names += [k for k in self.make_samples() if k not in names]
        except Exception:  # noqa: BLE001 - reported by the tests themselves, clearly, at run time
            pass
        metafunc.parametrize("sample", names)

    def _config_problem(self) -> str | None:
        cls = type(self).__name__
        if not isinstance(self.plugin_name, str) or not self.plugin_name:
            return (f"{cls} must set plugin_name to the plugin's registered name (its "
                    f"'interop_core.plugins' entry-point name), got {self.plugin_name!r}")
        mods = self.framework_modules
        if isinstance(mods, str):
            return (f"{cls}.framework_modules must be a tuple of module names, got the string "
                    f"{mods!r} (missing a trailing comma? write ({mods!r},))")
        if not isinstance(mods, (tuple, list)) or not all(isinstance(m, str) for m in mods):
            return f"{cls}.framework_modules must be a tuple of module names, got {mods!r}"
        if self.exporter_target is not None and not isinstance(self.exporter_target, str):
            return (f"{cls}.exporter_target must be an exporter name (str) or None, got "
                    f"{self.exporter_target!r}")
        if type(self).make_samples is PluginConformance.make_samples:
            return f"{cls} must implement make_samples(self) -> dict[str, object]"
        if type(self).expected is PluginConformance.expected:
            return f"{cls} must implement expected(self, obj) -> interop_core.testing.Expected"
        return None

    def _samples(self) -> dict[str, object]:
        problem = self._config_problem()
        if problem:
            _fail(problem)
        samples = self.make_samples()
        if not isinstance(samples, dict):
            _fail(f"{type(self).__name__}.make_samples() must return a dict of name -> object, "
                  f"got {type(samples).__name__}")
        missing = [k for k in REQUIRED_SAMPLES if k not in samples]
        if missing:
            _fail(f"{type(self).__name__}.make_samples() lacks the required sample(s) "
                  f"{', '.join(map(repr, missing))}; it must return all of "
                  f"{', '.join(map(repr, REQUIRED_SAMPLES))}")
        return samples

    def _sample(self, name: str):
        samples = self._samples()
        if name not in samples:
            _fail(f"{type(self).__name__}.make_samples() did not return the sample {name!r} "
                  f"this time (it must return the same keys on every call)")
        return samples.pop(name)

    def _expected(self, obj) -> Expected:
        exp = self.expected(obj)
        if not isinstance(exp, Expected):
            _fail(f"{type(self).__name__}.expected() must return interop_core.testing.Expected, "
                  f"got {type(exp).__name__}")
        return exp

    # --- the checks ---------------------------------------------------------------------------

    def test_samples_cover_required_layouts(self):
        """make_samples() returns every required sample, and expected() describes each."""
        for obj in self._samples().values():
            self._expected(obj)

    def test_view_matches_framework_metadata(self, sample):
        """``interop_core.view(obj)`` reports what the framework itself reports."""
        obj = self._sample(sample)
        exp = self._expected(obj)
        v = interop_core.view(obj)
        got = {"ptr": v.ptr, "shape": v.shape, "strides": v.strides, "dtype": v.dlpack_dtype,
               "device": (v.device_type, v.device_id), "readonly": v.readonly}
        want = {"ptr": exp.ptr, "shape": tuple(exp.shape), "strides": tuple(exp.strides),
                "dtype": tuple(exp.dtype), "device": tuple(exp.device),
                "readonly": bool(exp.readonly)}
        wrong = [f"  {k}: view says {got[k]!r}, the framework says {want[k]!r}"
                 for k in got if got[k] != want[k]]
        if wrong:
            _fail(f"view() of sample {sample!r} ({type(obj).__qualname__}) disagrees with the "
                  f"framework:\n" + "\n".join(wrong))

    def test_type_resolves_to_this_plugins_reader(self, sample):
        """The sample's exact type is read by this plugin's reader, not a generic fallback."""
        obj = self._sample(sample)
        interop_core.view(obj)  # resolves the lazily declared type
        entry = interop_core.plugins.reader_for(type(obj))
        owner = getattr(entry, "plugin", None)
        if owner != self.plugin_name:
            t = type(obj)
            _fail(f"{t.__module__}.{t.__qualname__} (sample {sample!r}) is read by "
                  f"{entry!r}, not by plugin {self.plugin_name!r}: does the plugin declare this "
                  f"exact type with add_type('{t.__module__}:{t.__qualname__}', ...)?")

    def test_view_keeps_owner_alive(self, sample):
        """The sample lives as long as its view, and is released once the view is gone."""
        obj = self._sample(sample)
        try:
            ref = weakref.ref(obj)
        except TypeError:
            pytest.skip(f"sample {sample!r} ({type(obj).__qualname__}) cannot be weakly "
                        f"referenced, so its lifetime cannot be observed")
        v = interop_core.view(obj)
        del obj
        gc.collect()
        if ref() is None:
            _fail(f"sample {sample!r} was freed while its view was alive: the reader must set "
                  f"owner= (or keepalive) to the object that holds the memory")
        del v
        gc.collect()
        if ref() is not None:
            _fail(f"sample {sample!r} is still alive after its view was dropped: something "
                  f"(the reader, a cache) keeps a strong reference to it")

    def test_loading_plugin_imports_no_framework(self):
        """Loading the plugin in a fresh interpreter imports none of ``framework_modules``."""
        problem = self._config_problem()
        if problem:
            _fail(problem)
        env = {k: v for k, v in os.environ.items()
               if k != "INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD"}
        proc = subprocess.run(
            [sys.executable, "-c", _LOAD_SCRIPT, json.dumps(sys.path), self.plugin_name,
             self.plugin_module or "", json.dumps(list(self.framework_modules))],
            capture_output=True, text=True, timeout=300, env=env)
        if proc.returncode != 0:
            _fail(f"loading plugin {self.plugin_name!r} in a fresh interpreter failed:\n"
                  f"{proc.stderr}")
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        if report["preloaded"]:
            _fail(f"{report['preloaded']} were imported before interop_core was (by "
                  f"sitecustomize or a .pth file?), so the check cannot run")
        if not report["found"]:
            _fail(f"plugin {self.plugin_name!r} was not found; known plugins: {report['known']}. "
                  f"Is its distribution installed with an 'interop_core.plugins' entry point of "
                  f"that name (or set plugin_module)?")
        if report["status"] != "loaded":
            _fail(f"plugin {self.plugin_name!r} did not load: status {report['status']!r}, "
                  f"reason {report['reason']!r}")
        if report["imported"]:
            _fail(f"loading plugin {self.plugin_name!r} imported {report['imported']}: import "
                  f"the framework lazily, inside readers and exporters only")

    def test_exporter_round_trips(self, sample):
        """``view -> to(view, exporter_target) -> view`` keeps pointer, layout and dtype."""
        if self.exporter_target is None:
            pytest.skip(f"{type(self).__name__}.exporter_target is None (no exporter to check)")
        obj = self._sample(sample)
        first = interop_core.view(obj)
        out = interop_core.to(first, self.exporter_target)
        again = interop_core.view(out)
        got = {"shape": again.shape, "strides": again.strides, "dtype": again.dlpack_dtype,
               "device": (again.device_type, again.device_id)}
        want = {"shape": first.shape, "strides": first.strides, "dtype": first.dlpack_dtype,
                "device": (first.device_type, first.device_id)}
        if first.size:  # an empty tensor's address means nothing; frameworks may normalise it
            got["ptr"], want["ptr"] = again.ptr, first.ptr
        wrong = [f"  {k}: after the round trip {got[k]!r}, before {want[k]!r}"
                 for k in want if got[k] != want[k]]
        if first.readonly and not again.readonly:
            wrong.append("  readonly: read-only memory came back writable")
        if wrong:
            _fail(f"to(view, {self.exporter_target!r}) of sample {sample!r} returned "
                  f"{type(out).__qualname__} over different memory:\n" + "\n".join(wrong))
        try:
            ref = weakref.ref(obj)
        except TypeError:
            return
        del obj, first, again
        gc.collect()
        if ref() is None:
            _fail(f"the exported {type(out).__qualname__} of sample {sample!r} does not keep "
                  f"the original owner alive")
