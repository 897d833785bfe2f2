"""Stage 1, the spec: read, limit and validate a spec file into a ``BenchmarkSpec`` (no torch)."""
