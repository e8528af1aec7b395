"""The pluggy hook specifications of interop-core.

A plugin implements one hook, :func:`interop_core_register`, marked with
``interop_core.hookimpl``.  It is *historic*: it runs once for every plugin, whenever the plugin
registers (before or after the first ``view()``), and never per object.
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
            ``add_stream_type`` (stream objects of the framework) and ``add_exporter`` (a
            zero-copy handoff into the framework).  Types are named ``"module:QualName"`` and
            resolved lazily, so the framework is never imported here.
        """
