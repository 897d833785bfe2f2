"""Profiling: NVTX/profiler ranges, torch traces, Nsight batching, the profiled child and its reports."""
