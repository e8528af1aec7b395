"""The launch path for kernel launchers: ``@viewable``."""
