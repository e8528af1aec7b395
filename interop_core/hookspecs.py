"""The pluggy hook specifications of interop-core.

A plugin implements one hook, :func:`interop_core_register`, marked with
``interop_core.hookimpl``.  It is *historic*: it runs once for every plugin, whenever the plugin
registers (before or after the first ``view()``), and never per object.  Everything a plugin
knows, sharded array types included, is declared through the registry this hook receives, so
that ``view()`` and ``shards()`` look their answers up in tables and never call pluggy.
"""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec", "InteropCoreHookSpecs"]

PROJECT_NAME = "interop_core"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class InteropCoreHookSpecs:
    """Hooks a plugin may implement."""

    @hookspec(historic=True)
    def interop_core_register(self, registry):
        """Declare what this plugin knows, once.

        Parameters
        ----------
        registry : interop_core.plugins.PluginRegistrar
            Records this plugin's declarations: ``add_type`` (an exact type and its reader),
            ``add_stream_type`` (stream objects of the framework), ``add_exporter`` (a
            zero-copy handoff into the framework), ``add_sharded_type`` (how a sharded array
            type yields its per-device shards, for ``interop_core.shards()``) and
            ``add_shard_assembler`` (how the framework builds its object from shards, for
            ``interop_core.to(shards, target)``).  Types are named ``"module:QualName"`` and
            resolved lazily, so the framework is never imported here.
        """
