"""Command-line front ends: argument parsing and exit statuses for the tools (``python -m param_compute.X``)."""
