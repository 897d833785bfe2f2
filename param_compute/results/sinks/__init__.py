"""Record sinks: where records go as runs finish (results file, console, CSV, OSS JSON)."""
