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

__all__ = ["REQUIRED_SAMPLES", "Expected", "PluginConformance"]


def __getattr__(name):
    # pytest imports this package (for the pytest11 plugin) in every session of an environment
    # with interop-core installed; the kit itself (and pytest's assertion helpers it uses) loads
    # only when a test module asks for one of its names.
    if name in __all__:
        from . import _kit

        return getattr(_kit, name)
    raise AttributeError(f"module 'interop_core.testing' has no attribute {name!r}")
