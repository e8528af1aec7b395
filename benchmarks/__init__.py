"""interop-core benchmarks: per-call timings beside peers, in the same run."""
