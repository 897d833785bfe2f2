"""Stage 1, the spec: read a spec file, hold it to its limits, validate it into a typed ``BenchmarkSpec`` (no torch)."""
