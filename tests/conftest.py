"""Shared fixtures and the `gpu` marker: GPU tests skip cleanly where no CUDA device exists."""

from __future__ import annotations

import pytest
from cuda_probe import cuda_device_count

import interop_core


def pytest_collection_modifyitems(config, items):
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: no libcuda or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def make_plugin(declare):
    """A plugin object whose hook runs `declare(registry)`."""

    class Plugin:
        @interop_core.hookimpl
        def interop_core_register(self, registry):
            declare(registry)

    return Plugin()


@pytest.fixture
def registered():
    """Register plugins by hand for one test; every one is unregistered afterwards."""
    names = []

    def register(declare, name):
        names.append(interop_core.register_plugin(make_plugin(declare), name=name))
        return names[-1]

    yield register
    for name in reversed(names):
        if any(info.name == name for info in interop_core.plugin_status()):
            interop_core.unregister_plugin(name)
