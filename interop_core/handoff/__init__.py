"""Handing views on to frameworks: ``to()`` and the handoff matrix of the main job."""
