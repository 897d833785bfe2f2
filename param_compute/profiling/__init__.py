"""Profiling: NVTX/profiler ranges, torch traces, Nsight batches and their reports."""
