"""Plugins: discovery through entry points, registration, and which reader wins for each type.

A plugin is a module (or any object) implementing the ``interop_core_register`` hook (see
:mod:`interop_core.hookspecs`).  Installed plugins are found through the entry-point group
``interop_core.plugins`` the first time :func:`interop_core.view` meets a type it does not know;
code that cannot ship an entry point calls :func:`register_plugin`.

What plugins declare is kept here as an ordered list of declarations.  Whenever it changes, the
winners (the latest declaration for each type, stream type and exporter) are computed and
installed into the compiled dispatch table, so ``view()`` itself never consults this module or
pluggy.  Types are declared by name (``"module:QualName"``) and resolved through ``sys.modules``
only once their module has been imported by someone else: loading a plugin imports no framework.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import warnings
from collections import namedtuple
from collections.abc import Callable

from .cuda import _streams
from .handoff import _limits
from .handoff._limits import ImportLimits
from .registry import _registry, _validation
from .shards import _shards

# (No dataclasses or typing here: importing them would double the cost of `import interop_core`.)
Any = object

__all__ = [
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "EXPORT_RULE_CAPSULE",
    "PluginInfo",
    "PluginLoadWarning",
    "PluginRegistrar",
    "ReadOnlyHandoffWarning",
    "discover",
    "exporter_for",
    "plugin_manager",
    "plugin_status",
    "reader_for",
    "register_plugin",
    "shard_assembler_for",
    "unregister_plugin",
]

ENTRY_POINT_GROUP = "interop_core.plugins"
DISABLE_AUTOLOAD_ENV = "INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD"
#: The name of a capsule holding a C export rule, ``int rule(PyObject *obj)`` (0: the object
#: may be exported; -1 with an exception set: it may not), for
#: :meth:`PluginRegistrar.add_export_rule`.
EXPORT_RULE_CAPSULE = "interop_core.export_rule_v1"


class PluginLoadWarning(UserWarning):
    """A plugin could not be loaded (import error or a failing hook) and was skipped."""


class ReadOnlyHandoffWarning(UserWarning):
    """``to()`` handed read-only memory to a framework that cannot mark its objects read-only."""


class PluginInfo(namedtuple("PluginInfo", "name distribution version claims exporters status reason")):
    """What is known about one plugin (a named tuple).

    Attributes
    ----------
    name : str
        The entry-point name, or the name given to :func:`register_plugin`.
    distribution : str or None
        The installed distribution that provides it (None when registered by hand).
    version : str or None
        That distribution's version.
    claims : tuple of str
        Every type it declared, as ``"module:QualName"``.
    exporters : tuple of str
        Every exporter target it declared.
    status : str
        ``"loaded"``, ``"framework not installed"`` (loaded, but none of the packages its types
        live in can be imported here) or ``"failed"``.
    reason : str or None
        Why it failed, or which framework is missing.
    """

    __slots__ = ()


class _Declaration:
    __slots__ = ("sequence", "plugin", "kind", "target", "value", "types")

    def __init__(self, sequence, plugin, kind, target, value, types=()):
        self.sequence = sequence  # registration order: a later declaration overrides an earlier
        self.plugin = plugin      # name of the plugin that made it
        # "type", "stream", "sharded", "exporter", "assembler" or "rule"
        self.kind = kind
        self.target = target      # a type, a "module:QualName" string, or a target name
        # ReaderEntry, (stream-handle callable, keep_last), ShardedEntry, (exporter callable,
        # preserves_readonly, ImportLimits or None), an assembler callable or an export rule
        # (a callable or a capsule): the plugin's objects, held here.
        self.value = value
        self.types = types        # for exporters: the types the target framework produces


class _Plugin:
    __slots__ = ("name", "obj", "distribution", "version", "status", "reason", "declarations",
                 "by_hand")

    def __init__(self, name, obj, distribution, version, status="loaded", reason=None,
                 by_hand=False):
        self.name = name
        self.obj = obj            # the registered module/object (the pluggy manager holds it too)
        self.distribution = distribution
        self.version = version
        self.status = status
        self.reason = reason
        self.declarations = []    # this plugin's _Declarations, in the order it made them
        # register_plugin() rather than an entry point: its declarations override every
        # entry point's, whenever discovery (which is lazy) happens to run.
        self.by_hand = by_hand


# All state below is guarded by _lock.  view() reads only the compiled table, never these.
_lock = threading.RLock()
_manager = None                # pluggy.PluginManager, created on first need (pluggy is slow to import)
_plugins: dict[str, _Plugin] = {}
_declarations: list[_Declaration] = []
_sequence = itertools.count()
_registering: str | None = None  # the plugin whose hook is running (declarations belong to it)
_discovered = False
# Top-level package -> the type / stream-type targets declared in it that are not resolved yet.
_pending: dict[str, list] = {}
_exporters: dict[str, Callable] = {}  # target name -> winning exporter
_exporter_names_by_type: dict[type, str] = {}
_exporter_declarations: dict[str, _Declaration] = {}
# Target name -> the winning shard assembler (to(shards, target)).  Replaced whole by _recompute.
shard_assemblers: dict[str, Callable] = {}
# What to() reads without taking the lock: target name or produced type -> (exporter,
# preserves_readonly, name, limits).  Replaced whole (never mutated) by _recompute.
export_table: dict = {}
# Source type -> its export rule (a callable or a capsule), installed into to()'s compiled
# table through the listeners below.  Replaced whole by _recompute.
export_rules: dict = {}
_export_rule_listeners: list = []    # callables(rules dict), called with _lock held


def _split_path(path: str) -> tuple[str, str]:
    module, sep, qualname = path.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"a type must be named 'module:QualName' (e.g. 'torch:Tensor'), got {path!r}")
    return module, qualname


def _type_path(target: Any) -> str:
    if isinstance(target, type):
        return f"{target.__module__}:{target.__qualname__}"
    return target


def _resolve(target: Any) -> type | None:
    """The type a declaration names, if its module is already imported; never imports."""
    if isinstance(target, type):
        return target
    module_name, qualname = _split_path(target)
    obj = sys.modules.get(module_name)
    for part in qualname.split("."):
        if obj is None:
            return None
        try:
            obj = getattr(obj, part, None)
        except Exception:
            # A lazy module's __getattr__ or a class property that raises: the declaration
            # stays unresolved for this plugin alone, never breaking everyone's registry.
            return None
    return obj if isinstance(obj, type) else None


def _validate_target(target: Any, what: str) -> None:
    if isinstance(target, type):
        return
    if not isinstance(target, str):
        raise TypeError(f"{what} must be a type or a 'module:QualName' string, got {type(target).__name__}")
    _split_path(target)


class PluginRegistrar:
    """Records one plugin's declarations; passed to its ``interop_core_register`` hook.

    Every method may be called any number of times; nothing is imported, and types named by
    string are resolved only once their module has been imported elsewhere.
    """

    def _record(self, kind: str, target: Any, value: Any, types: tuple = ()) -> None:
        if _registering is None:
            raise RuntimeError(
                "PluginRegistrar methods may only be called from an interop_core_register hook "
                "while interop-core registers that plugin (use interop_core.register_plugin)")
        declaration = _Declaration(next(_sequence), _registering, kind, target, value, types)
        _plugins[_registering].declarations.append(declaration)

    def add_type(self, type_: type | str, reader: str | Callable | Any, *, subclasses: bool = False,
                 producer_stream: Callable[[Any], int | None] | None = None,
                 fallback: str | Callable | Any | tuple | None = None,
                 prepare: Callable[[], Any] | None = None,
                 canaries: Callable[[], Any] | None = None,
                 readonly: bool = False, equivalent_to: tuple[str, ...] = (),
                 equivalence_check: dict[str, Any] | None = None) -> None:
        """Read objects of exactly ``type_`` with ``reader``.

        Parameters
        ----------
        type_ : type or str
            The type, or its ``"module:QualName"`` (preferred: no import needed).
        reader : str, callable or PyCapsule
            A core reader name (``"dlpack"``, ``"dlpack_c_exchange_api"``, ``"dunder_dlpack"``,
            ``"cuda_array_interface"``, ``"array_interface"``, ``"buffer_protocol"``), a Python
            callable ``(obj, stream) -> StridedMemoryView`` (returning ``NotImplemented``
            declines the object), or a PyCapsule named ``"interop_core.reader_v2"`` (or
            ``"interop_core.reader_v1"``) holding a C reader
            (``interop_core/include/interop_core.h``).
        subclasses : bool
            Let subclasses of ``type_`` use this reader too.  Off by default: a subclass may
            change what the memory means (torch's FakeTensor, say).
        producer_stream : callable, optional
            ``callable(obj) -> int or None``: the producer's current CUDA stream, for ordering.
            It may also order the producer's pending work onto a stream of its own and return
            that (jax), or finish asynchronous host work and return ``None``.
        fallback : str, callable, PyCapsule, or a tuple of them, optional
            A reader of the same kinds as ``reader`` for the objects ``reader`` declines, and
            for all objects when ``reader`` fails its validation.  A tuple is a chain: its
            first reader is the fallback, and each next one reads what the one before it
            declines.
        prepare : callable, optional
            ``prepare() -> None, dict or str``, run once before ``reader`` is first used: the
            plugin's own checks of the layouts ``reader`` relies on.  A str says why ``reader``
            must not be used (``fallback`` is installed instead); a dict holds details of a
            success, shown by ``python -m interop_core doctor``.
        canaries : callable, optional
            ``canaries() -> iterable``: objects that ``reader`` must read exactly as
            ``fallback`` does (pointer, shape, strides, dtype, device, read-only flag), checked
            once after ``prepare``.  Requires ``fallback``.
        readonly : bool
            The type's objects are immutable (jax arrays): every view of one reports read-only,
            whichever path made it (``view()``, ``StridedMemoryView.from_any``,
            ``from_dlpack``, ...), even where the protocol itself cannot say so.
        equivalent_to : tuple of str
            The exchange protocols whose own reading of these objects ``reader`` (and every
            fallback) reproduces exactly: pointer, shape, strides, dtype, device, read-only
            flag and stream ordering (``"dlpack"``, ``"cuda_array_interface"``,
            ``"array_interface"``, ``"buffer_protocol"``).  ``StridedMemoryView.from_dlpack``
            and the other ``from_*`` classmethods of those protocols then read through
            ``reader`` too, as fast as ``view()``; an object ``reader`` refuses with a
            ``BufferError`` goes to the protocol itself.  Declare only what holds for every
            object of the type, or give ``equivalence_check``.
        equivalence_check : dict, optional
            ``{protocol name: check}``, for protocols of ``equivalent_to`` whose own reading
            matches ``reader``'s for most objects of the type but not all: the check is asked
            per object, after ``reader`` read it for that protocol's ``from_*`` classmethod,
            whether the protocol would give the same view.  A check is a capsule named
            ``"interop_core.equivalence_check_v1"`` (``interop_core.h``: called with the
            object, the protocol and what was read) or a callable
            ``(obj, protocol_name, view) -> bool``.  False: the protocol itself answers.  Host
            memory is never the CUDA Array Interface's, nor device memory the host protocols':
            the core refuses those without asking.
        """
        _validate_target(type_, "type_")
        entry = _registry.new_entry(reader, plugin=_registering, subclasses=subclasses,
                                    producer_stream=producer_stream, type_path=_type_path(type_),
                                    fallback=fallback, prepare=prepare, canaries=canaries,
                                    readonly=readonly, equivalent_to=equivalent_to,
                                    equivalence_check=equivalence_check)
        self._record("type", type_, entry)

    def add_stream_type(self, type_: type | str, handle: Callable[[Any], int], *,
                        keep_last: bool | str = False) -> None:
        """Accept objects of exactly ``type_`` as ``stream=`` arguments.

        Parameters
        ----------
        type_ : type or str
            The stream class, or its ``"module:QualName"``.
        handle : callable
            ``handle(stream_object) -> int``: the ``CUstream`` it stands for.  A C callable
            (``operator.attrgetter("ptr")``, say) keeps the per-call cost down.
        keep_last : {False, True, "weak"}
            Remember the last object resolved, so that passing it again skips ``handle`` (one
            pointer comparison).  Only for objects whose handle never changes.  ``True`` keeps
            it by a strong reference: only for types whose objects own no CUDA stream (torch's,
            from its stream pool), since keeping one alive must hold nothing.  ``"weak"`` keeps
            a weak reference: for types that own their stream and clear their weak references
            when freed, as every ordinary Python or Cython class does (cupy's); not for types
            that do not (torch 2.11's CUDA streams).
        """
        _validate_target(type_, "type_")
        if not callable(handle):
            raise TypeError(f"handle must be callable, got {type(handle).__name__}")
        if not (keep_last is False or keep_last is True or keep_last == "weak"):
            raise ValueError(f"keep_last must be False, True or 'weak', got {keep_last!r}")
        self._record("stream", type_, (handle, keep_last))

    def add_exporter(self, target: str, exporter: Callable | Any, *,
                     types: type | str | tuple = (),
                     preserves_readonly: bool = False,
                     limits: ImportLimits | None = None) -> None:
        """Hand views on to a framework: ``interop_core.to(obj, target)``.

        Parameters
        ----------
        target : str
            The name users pass to ``to()`` (``"torch"``, ``"bytetensor"``, ...).
        exporter : callable or PyCapsule
            ``exporter(view, stream) -> object``: the framework's object over the same memory,
            keeping ``view`` (and so its owner) alive.  Or a capsule named
            ``"interop_core.exporter_v1"`` holding a C exporter (``interop_core.h``), which
            ``to()`` hands a compiled reader's description of the source without making a view
            (see "Compiled exporters" in the plugin guide).
        types : type, str, or tuple of (type or str)
            The framework types this target produces, so ``to(obj, SomeType)`` finds it (a
            type or ``"module:QualName"`` alone stands for a tuple of one).
        preserves_readonly : bool
            Whether the framework's object can be read-only (numpy, jax).  When it cannot
            (torch, cupy), ``to()`` of a read-only view warns with
            :class:`ReadOnlyHandoffWarning`: the consumer could write memory the producer
            declared read-only.
        limits : ImportLimits, optional
            What the framework cannot import (layouts, host alignment, device types, dtypes it
            cannot hold as configured).  ``to()`` checks them before ``exporter`` runs and
            hands it a dense copy or raises ``BufferError``, as the call's ``copy=`` allows:
            the exporter never sees a view its framework would abort on, copy or convert.
            ``None``: the framework takes every layout.
        """
        if not isinstance(target, str) or not target:
            raise TypeError(f"exporter target must be a non-empty str, got {target!r}")
        if limits is not None and type(limits) is not ImportLimits:
            raise TypeError(f"limits must be an interop_core.ImportLimits or None, got "
                            f"{type(limits).__name__}")
        exporter = _registry.new_exporter(exporter)    # a capsule becomes a CExporter
        if isinstance(types, (str, type)):
            types = (types,)        # one type: a str is a name, not a sequence of letters
        for t in types:
            _validate_target(t, "exporter types")
        self._record("exporter", target, (exporter, bool(preserves_readonly), limits),
                     tuple(types))

    def add_export_rule(self, type_: type | str, rule: Callable[[Any], Any] | Any, *,
                        subclasses: bool = False) -> None:
        """Refuse some objects of ``type_`` to every ``to()``, as their framework does.

        The framework's own rule for handing its objects on (torch: tensors that require grad
        are not exported).  ``view()`` and ``launch_args()`` do not apply it: a launcher reads
        such a tensor's pointer on purpose.

        Parameters
        ----------
        type_ : type or str
            The source type, or its ``"module:QualName"``.
        rule : callable or PyCapsule
            ``rule(obj) -> None``, raising (``BufferError``, naming the fix) for an object that
            must not be exported; or a capsule named ``"interop_core.export_rule_v1"`` holding
            a C function ``int rule(PyObject *obj)``: 0, or -1 with an exception set.  Called
            once per ``to()`` of such an object: keep it cheap (a C rule costs nanoseconds).
        subclasses : bool
            Apply the rule to subclasses of ``type_`` too (off by default, as for
            ``add_type``); a subclass with a rule of its own keeps its own.
        """
        _validate_target(type_, "type_")
        self._record("rule", type_, _limits.new_export_rule(rule, subclasses=subclasses))

    def add_sharded_type(self, type_: type | str, shards: Callable[[Any, Any], Any], *,
                         subclasses: bool = False,
                         fallback: Callable[[Any, Any], Any] | None = None,
                         prepare: Callable[[], Any] | None = None,
                         canaries: Callable[[], Any] | None = None) -> None:
        """Let ``interop_core.shards()`` split objects of exactly ``type_`` into their shards.

        Parameters
        ----------
        type_ : type or str
            The sharded array type, or its ``"module:QualName"`` (preferred: no import needed).
        shards : callable
            ``shards(obj, stream) -> interop_core.Shards``: the shards this process holds,
            built with :meth:`interop_core.Shards.from_pieces` from the framework's own local
            pieces (``stream`` passed on to it).  Raise ``ValueError`` for layouts that have no
            per-device pieces (partial sums, say).
        subclasses : bool
            Let subclasses of ``type_`` use it too (off by default, as for ``add_type``).
        fallback : callable, optional
            A ``shards`` callable on the framework's documented API, for when ``shards`` reads
            undocumented internals: installed instead of it when its validation fails.
        prepare : callable, optional
            ``prepare() -> None, dict or str``, run once before ``shards`` is first used, as for
            ``add_type``: a str says why it must not be used (``fallback`` is installed).
        canaries : callable, optional
            ``canaries() -> iterable``: sharded objects that ``shards`` must split exactly as
            ``fallback`` does (each shard's view, index and replica id, and the global shape,
            dtype and completeness), checked once after ``prepare`` on the type's first
            ``shards()``.  Requires ``fallback``.

        Notes
        -----
        ``view()`` of a sharded object is a different question: a plugin should also declare
        a reader for the type (``add_type``) that refuses with a ``BufferError`` naming
        ``interop_core.shards()``, unless the object is sometimes on one device.
        """
        _validate_target(type_, "type_")
        entry = _shards.new_sharded_entry(shards, plugin=_registering, subclasses=subclasses,
                                          type_path=_type_path(type_), fallback=fallback,
                                          prepare=prepare, canaries=canaries)
        self._record("sharded", type_, entry)

    def add_shard_assembler(self, target: str, assemble: Callable[..., Any]) -> None:
        """Build ``target``'s object from shards: ``interop_core.to(shards, target, ...)``.

        Parameters
        ----------
        target : str
            The name users pass to ``to()``; usually a target this plugin exports to.
        assemble : callable
            ``assemble(shards, stream, **options) -> object``: the framework's object(s)
            over the shards' memory, zero-copy (``options`` are the keywords the user gave
            ``to()``, ``sharding=`` for jax, say).  Raise ``TypeError`` for an unknown option
            and ``ValueError`` for options the shards do not match.  Without an assembler,
            ``to(shards, target)`` hands each shard over on its own (a tuple).
        """
        if not isinstance(target, str) or not target:
            raise TypeError(f"assembler target must be a non-empty str, got {target!r}")
        if not callable(assemble):
            raise TypeError(f"assemble must be callable, got {type(assemble).__name__}")
        self._record("assembler", target, assemble)


_registrar = PluginRegistrar()


def plugin_manager():
    """The pluggy ``PluginManager("interop_core")`` (created, and pluggy imported, on first use).

    Returns
    -------
    pluggy.PluginManager
    """
    global _manager
    with _lock:
        if _manager is None:
            import pluggy

            from . import hookspecs

            manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
            manager.add_hookspecs(hookspecs.InteropCoreHookSpecs)
            manager.hook.interop_core_register.call_historic(kwargs={"registry": _registrar})
            _manager = manager
        return _manager


def _warn(name: str, message: str) -> None:
    warnings.warn(f"interop-core plugin {name!r} was skipped: {message}", PluginLoadWarning,
                  stacklevel=3)


# What a plugin's import or hook may raise and still leave the others loading.  SystemExit too:
# a plugin that calls sys.exit() when its framework is missing must not end the user's program
# from inside a view() that happened to trigger discovery.  KeyboardInterrupt still stops it.
_PLUGIN_FAILURES = (Exception, SystemExit)


def _register(obj: Any, name: str, distribution: str | None, version: str | None,
              by_hand: bool = False) -> _Plugin:
    """Register with pluggy (which runs the historic hook at once) and recompute the winners."""
    global _registering
    manager = plugin_manager()
    plugin = _Plugin(name, obj, distribution, version, by_hand=by_hand)
    _plugins[name] = plugin
    _registering = name
    try:
        manager.register(obj, name=name)
    except _PLUGIN_FAILURES as exc:
        plugin.declarations.clear()
        if manager.get_plugin(name) is not None:
            manager.unregister(name=name)
        plugin.status, plugin.reason = "failed", f"{type(exc).__name__}: {exc}"
        plugin.obj = None
    except BaseException:
        # KeyboardInterrupt: nothing of the plugin stays registered, and the interrupt goes on.
        plugin.declarations.clear()
        if manager.get_plugin(name) is not None:
            manager.unregister(name=name)
        del _plugins[name]
        raise
    finally:
        _registering = None
    _recompute()
    return plugin


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin by hand (for code that cannot ship an entry point).

    Its ``interop_core_register`` hook runs now; what it declares overrides the entry-point
    plugins' declarations for the same types, stream types and exporters (whether they are
    discovered before or after it), and those of plugins registered by hand earlier.

    Parameters
    ----------
    plugin : module or object
        Implements ``interop_core_register`` (marked with ``interop_core.hookimpl``).
    name : str, optional
        Defaults to the module's ``__name__`` or the object's class name.

    Returns
    -------
    str
        The name it was registered under.

    Raises
    ------
    TypeError
        If ``name`` is not a str.
    ValueError
        If ``name`` is empty, or a plugin of that name is already registered.
    Exception
        Whatever the plugin's hook raised (the plugin is then not registered).
    """
    if name is None:
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
    if not isinstance(name, str):
        raise TypeError(f"register_plugin: name must be a str, got {name!r} "
                        f"({type(name).__name__})")
    if not name:
        raise ValueError("register_plugin: name must not be empty")
    with _lock:
        if name in _plugins and _plugins[name].status != "failed":
            raise ValueError(f"a plugin named {name!r} is already registered; unregister it first")
        record = _register(plugin, name, None, None, by_hand=True)
        if record.status == "failed":
            del _plugins[name]
            raise RuntimeError(f"plugin {name!r} could not be registered: {record.reason}")
    return name


def unregister_plugin(plugin_or_name: Any) -> None:
    """Remove a plugin and everything it declared (earlier declarations become visible again).

    Parameters
    ----------
    plugin_or_name : str or object
        The plugin's name or the registered object.

    Raises
    ------
    KeyError
        If no such plugin is registered.
    """
    with _lock:
        if isinstance(plugin_or_name, str):
            name = plugin_or_name
        else:
            name = next((n for n, p in _plugins.items() if p.obj is plugin_or_name), None)
        if name is None or name not in _plugins:
            raise KeyError(f"no interop-core plugin {plugin_or_name!r} is registered")
        plugin = _plugins.pop(name)
        if plugin.obj is not None and _manager is not None and _manager.get_plugin(name) is not None:
            _manager.unregister(name=name)
        _recompute()


def _autoload_disabled() -> bool:
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("", "0", "false", "no")


def discover() -> None:
    """Load every plugin of the entry-point group ``interop_core.plugins`` (once per process).

    Does nothing when ``INTEROP_CORE_DISABLE_PLUGIN_AUTOLOAD`` is set (to anything but
    ``0``/``false``/``no``).  A plugin that fails to import or whose hook raises is skipped with
    one :class:`PluginLoadWarning`; the others still load.
    """
    global _discovered
    with _lock:
        if _discovered:
            return
        _discovered = True
        if _autoload_disabled():
            return
        from importlib.metadata import entry_points

        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in _plugins:
                continue  # registered by hand already: that registration stands
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            try:
                obj = ep.load()
            except _PLUGIN_FAILURES as exc:
                _plugins[ep.name] = _Plugin(ep.name, None, dist_name, version, "failed",
                                            f"import failed: {type(exc).__name__}: {exc}")
                _warn(ep.name, _plugins[ep.name].reason)
                continue
            record = _register(obj, ep.name, dist_name, version)
            if record.status == "failed":
                _warn(ep.name, f"its hook failed: {record.reason}")


def _recompute() -> None:
    """Compute the winning declarations and install them (called with _lock held)."""
    declarations = sorted(((p.by_hand, d.sequence), d) for p in _plugins.values()
                          if p.status == "loaded" for d in p.declarations)
    declarations = [d for _, d in declarations]
    readers: dict[type, Any] = {}
    stream_handles: dict[type, tuple[Callable, bool]] = {}
    exporters: dict[str, _Declaration] = {}
    sharded: dict[type, Any] = {}
    assemblers: dict[str, Callable] = {}
    rules: dict[type, Any] = {}
    pending: dict[str, list] = {}
    for d in declarations:
        if d.kind == "assembler":
            assemblers[d.target] = d.value
            continue
        if d.kind == "exporter":
            exporters[d.target] = d
            for t in d.types:
                if _resolve(t) is None:
                    pending.setdefault(_split_path(t)[0].split(".")[0], []).append(t)
            continue
        resolved = _resolve(d.target)
        if resolved is None:
            pending.setdefault(_split_path(d.target)[0].split(".")[0], []).append(d.target)
        elif d.kind == "type":
            # The type's module is imported by now: validate a checked reader (once).
            readers[resolved] = _validation.chosen_entry(d.value)
        elif d.kind == "sharded":
            sharded[resolved] = d.value
        elif d.kind == "rule":
            rules[resolved] = d.value
        else:
            stream_handles[resolved] = d.value
    _pending.clear()
    _pending.update(pending)
    _exporter_declarations.clear()
    _exporter_declarations.update(exporters)
    _exporters.clear()
    _exporters.update({name: d.value for name, d in exporters.items()})
    _exporter_names_by_type.clear()
    for name, d in exporters.items():
        for t in d.types:
            resolved = _resolve(t)
            if resolved is not None:
                _exporter_names_by_type[resolved] = name
    global export_table, shard_assemblers, export_rules
    shard_assemblers = assemblers
    table = {name: (*_exporters[name][:2], name, _exporters[name][2]) for name in _exporters}
    table.update({t: table[name] for t, name in _exporter_names_by_type.items()})
    export_table = table
    export_rules = rules
    for listener in _export_rule_listeners:
        listener(rules)
    _registry.set_entries(readers)
    _streams.set_stream_types(stream_handles)
    _shards.set_sharded_types(sharded)


def _reinstall() -> None:
    """Compute and install the winners again (after a validation result changed)."""
    with _lock:
        _recompute()


_validation.on_result_change(_reinstall)


def _on_miss(t: type) -> bool:
    """Called by view() for a type the table lacks: discover plugins, resolve what is pending."""
    with _lock:
        first = not _discovered
        if first:
            discover()
        package = t.__module__.split(".")[0] if isinstance(t.__module__, str) else ""
        # Recompute only when a declaration of this package resolves now: a recompute forgets
        # every cached decision, and some declarations never resolve (other versions' names).
        if any(_resolve(target) is not None for target in _pending.get(package, ())):
            _recompute()
            return True
        return first


def reader_for(t: type) -> Any:
    """The reader ``view()`` uses for objects of exactly type ``t`` (after discovery).

    Parameters
    ----------
    t : type

    Returns
    -------
    ReaderEntry or None
        Its ``plugin`` attribute names the plugin that registered it (``None`` for the
        generic protocols); ``None`` when the type has not been seen and no plugin claims it.
    """
    _on_miss(t)
    return _registry.entry_for(t)


def exporter_for(target: Any) -> tuple[Callable, bool, str, ImportLimits | None]:
    """The exporter ``to()`` uses for ``target`` (a name, or a type some exporter produces).

    Returns
    -------
    tuple
        ``(exporter, preserves_readonly, target name, limits)``: ``limits`` is the
        :class:`ImportLimits` the plugin declared, or None.

    Raises
    ------
    ValueError
        If no plugin exports to that target; the message lists the targets there are.
    """
    discover()
    with _lock:
        if isinstance(target, type):
            package = target.__module__.split(".")[0]
            if target not in _exporter_names_by_type and any(
                    _resolve(t) is not None for t in _pending.get(package, ())):
                _recompute()
            name = _exporter_names_by_type.get(target)
            if name is None:
                raise ValueError(
                    f"no plugin exports to {target.__module__}.{target.__qualname__}; "
                    f"{_known_targets()}")
            target = name
        if not isinstance(target, str):
            raise TypeError(f"target must be a name or a type, got {type(target).__name__}")
        exporter = _exporters.get(target)
        if exporter is None:
            raise ValueError(f"no plugin exports to {target!r}; {_known_targets()}")
        return (exporter[0], exporter[1], target, exporter[2])


def _on_export_rules_change(listener: Callable[[dict], None]) -> None:
    """Call ``listener(rules)`` now and whenever the winning export rules change.

    ``rules`` maps each resolved source type to its rule; ``to()``'s compiled table installs
    itself this way (plugins never call it).
    """
    with _lock:
        _export_rule_listeners.append(listener)
        listener(export_rules)


def _framework_importable(packages: set[str]) -> bool:
    """Whether any of these top-level packages can be imported here (none is imported)."""
    import importlib.util

    for package in packages:
        if package in sys.modules:      # imported already (a script's __main__ too)
            return True
        try:
            if importlib.util.find_spec(package) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _known_targets() -> str:
    """The exporter targets for an error message: those usable here apart from those whose
    framework is not installed (called with _lock held)."""
    usable, absent = [], []
    for name in sorted(_exporters):
        declaration = _exporter_declarations.get(name)
        packages = {_type_path(t).partition(":")[0].split(".")[0]
                    for t in (declaration.types if declaration is not None else ())}
        # A target that names no types cannot be checked: it is listed as usable.
        (usable if not packages or _framework_importable(packages) else absent).append(name)
    text = f"known targets: {', '.join(usable) or 'none'}"
    if absent:
        text += f" (installed); {', '.join(absent)} (framework not installed here)"
    return text


def shard_assembler_for(target: str) -> Callable | None:
    """The callable ``to(shards, target)`` assembles with, or None (each shard handed over).

    Parameters
    ----------
    target : str
        An exporter target name.

    Returns
    -------
    callable or None
    """
    discover()
    return shard_assemblers.get(target)


def plugin_status() -> list[PluginInfo]:
    """Every plugin interop-core knows of (after discovery), in name order.

    Returns
    -------
    list of PluginInfo
    """

    discover()
    with _lock:
        infos = []
        for name in sorted(_plugins):
            p = _plugins[name]
            claims = tuple(dict.fromkeys(_type_path(d.target) for d in p.declarations
                                         if d.kind in ("type", "sharded")))
            exporters = tuple(d.target for d in p.declarations if d.kind == "exporter")
            status, reason = p.status, p.reason
            packages = sorted({c.split(":")[0].split(".")[0] for c in claims})
            if status == "loaded" and packages:
                missing = [pkg for pkg in packages if not _framework_importable({pkg})]
                if len(missing) == len(packages):
                    # The status says "not installed"; the reason names what is missing.
                    status, reason = "framework not installed", ", ".join(missing)
            infos.append(PluginInfo(name, p.distribution, p.version, claims, exporters, status,
                                    reason))
        return infos


_registry.set_miss_handler(_on_miss)
_shards.set_miss_handler(_on_miss)
