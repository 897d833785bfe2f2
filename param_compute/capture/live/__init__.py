"""Capture from a live run: a dispatch mode recording each aten call, and the original timed."""
