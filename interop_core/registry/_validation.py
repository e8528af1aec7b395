"""Validate once, else fall back: the one mechanism for readers built on undocumented layouts.

A fast reader that reads a framework's objects below its documented API (torch's AOTI handle
offset, numpy's and cupy's structs, jax internals) registers with two checks and a fallback::

    registry.add_type("numpy:ndarray", reader=fast_capsule, fallback=slow_reader,
                      prepare=locate_and_check_fields, canaries=canary_arrays)

The first time the type is dispatched (its framework is then imported), the core runs, once
per process: ``prepare()`` (the plugin's own checks, e.g. raw fields compared before any pointer
read from them is followed; it returns ``None``, a dict of details, or a str saying why the
reader must not be used), then reads every object ``canaries()`` yields with both the fast
reader and the fallback and compares the two records field by field.  Any difference, refusal or
exception installs the fallback instead of the fast reader for the rest of the process, and the
reason is kept.  ``python -m interop_core doctor`` reports every result; tests force a result
with :func:`_force` (private: it is no switch for users).

A sharded type's fast path is checked the same way (``registry.add_sharded_type(...,
fallback=, prepare=, canaries=)``), on the first ``shards()`` of the type: the canaries are
sharded objects, split by both paths and compared shard by shard
(:func:`interop_core.shards._shards.compare_shards`).
"""

from __future__ import annotations

import threading
from collections import namedtuple

from . import _registry

__all__ = ["ValidationResult", "chosen_entry", "on_result_change", "results"]


class ValidationResult(namedtuple("ValidationResult",
                                  "type_path plugin validated reason details canaries kind",
                                  defaults=("reader",))):
    """The outcome of one reader's validation (a named tuple).

    Attributes
    ----------
    type_path : str
        The type the reader was registered for, ``"module:QualName"``.
    plugin : str
        The plugin that registered it.
    validated : bool
        True: the fast reader is in use.  False: the fallback is, for the rest of the process.
    reason : str
        Why (what differed, what ``prepare()`` refused, or what a test forced).
    details : dict
        What ``prepare()`` reported on success (e.g. which optional fast paths it enabled).
    canaries : int
        How many canary objects both readers read identically.
    kind : str
        ``"reader"`` (``view()``'s reader of the type) or ``"shards"`` (``shards()``'s path).
    """


# (type_path, prepare, canaries) -> ValidationResult.  Keyed by the checks themselves, so a
# plugin registered again with the same checks is not validated again.
_results: dict[tuple, ValidationResult] = {}
# (key, thread id) of each validation running now.  Only that thread's nested requests are
# answered with the fallback; another thread validates for itself, as before.
_validating: set[tuple] = set()
# type_path -> (ok, reason): results pinned by tests through _force.
_forced: dict[str, tuple[bool, str]] = {}
# Installs the winners again after a result changed; set by interop_core.plugins, which owns the
# installation (a callback, so that this module imports nothing above the registry).
_reinstall = None


def on_result_change(reinstall) -> None:
    """Call ``reinstall()`` whenever a validation result is pinned or unpinned."""
    global _reinstall
    _reinstall = reinstall


def chosen_entry(entry):
    """The entry to install for a registration: ``entry`` when it validates, else its fallback.

    Entries without checks are returned as they are.  Validation runs at most once per
    process for the same checks (or again after :func:`_force`).
    """
    if entry.prepare is None and entry.canaries is None:
        return entry
    key = (entry.type_path, entry.prepare, entry.canaries)
    result = _results.get(key)
    if result is None:
        running = (key, threading.get_ident())
        if running in _validating:
            # Asked again from inside this key's own validation (a canary read misses the
            # dispatch table, which recomputes every entry): the fallback serves that nested
            # read, and the outer call records the result and installs the winner.
            return entry.fallback
        _validating.add(running)
        try:
            result = _validate(entry)
        finally:
            _validating.discard(running)
        _results[key] = result
    return entry if result.validated else entry.fallback


def results() -> list[ValidationResult]:
    """Every validation run so far in this process, in the order they ran."""
    return list(_results.values())


def _validate(entry) -> ValidationResult:
    kind = "reader" if isinstance(entry, _registry.ReaderEntry) else "shards"

    def outcome(ok, reason, details=None, count=0):
        return ValidationResult(entry.type_path, entry.plugin, ok, reason, details or {}, count,
                                kind)

    forced = _forced.get(entry.type_path)
    if forced is not None:
        return outcome(forced[0], forced[1])
    count = 0
    try:
        details = entry.prepare() if entry.prepare is not None else None
        if isinstance(details, str):
            return outcome(False, details)
        if entry.canaries is not None:
            for canary in entry.canaries():
                why = _compare(entry, canary)
                if why == "declined":
                    continue
                if why is not None:
                    return outcome(False, f"canary read differently from the fallback: {why}",
                                   details, count)
                count += 1
    except (Exception, SystemExit) as exc:  # a check that breaks failed: fall back, say why
        return outcome(False, f"validation raised {type(exc).__name__}: {exc}", None, count)
    return outcome(True, f"{count} canaries read as the fallback reads them", details, count)


def _compare(entry, canary) -> str | None:
    """How ``entry`` and its fallback treat ``canary`` differently, or None (or "declined")."""
    if isinstance(entry, _registry.ReaderEntry):
        return _registry.compare_readers(entry, entry.fallback, canary)
    from ..shards import _shards  # above the registry: imported when a sharded path validates

    return _shards.compare_shards(entry, entry.fallback, canary)


def _force(type_path: str, ok: bool | None, reason: str = "forced by a test") -> None:
    """Pin the validation result of ``type_path``'s fast paths (``None`` unpins) and reinstall.

    Pins every validated path of the type: its reader and its sharded path, if it has both.
    For tests of the fallback paths; not part of the public API.
    """
    if ok is None:
        _forced.pop(type_path, None)
    else:
        _forced[type_path] = (bool(ok), str(reason))
    for key in [k for k in _results if k[0] == type_path]:
        del _results[key]
    if _reinstall is not None:
        _reinstall()
