"""Capture from recorded traces: execution traces and Kineto traces, read as untrusted data."""
