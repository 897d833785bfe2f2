"""Stage 2, the run plan: a validated spec expanded lazily into keyed runs (no torch)."""
