"""interop_core.testing: the conformance kit for plugin authors.

Subclass :class:`PluginConformance` in a test module, fill in its class attributes and two
methods, and pytest runs the kit's checks against your plugin::

    from interop_core.testing import Expected, PluginConformance

    class TestMyPlugin(PluginConformance):
        plugin_name = "myframework"
        framework_modules = ("myframework",)
        ...

See ``docs/plugins.md`` ("Running the conformance kit") for the full walkthrough.
"""

from ._kit import REQUIRED_SAMPLES, Expected, PluginConformance

__all__ = ["REQUIRED_SAMPLES", "Expected", "PluginConformance"]
