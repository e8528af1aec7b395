# to(), compiled (see _handoff.pyx): the core's compiled view plus the winning exporter's call.
# Nothing is cimported from here: callers use the Python-level `to`.
