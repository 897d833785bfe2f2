"""Profiling: torch traces, CUPTI counters, Nsight batches and their reports."""
