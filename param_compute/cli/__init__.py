"""Command-line front ends: parsing and exit statuses of the ``python -m`` tools."""
