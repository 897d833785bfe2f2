"""Stage 2, the run plan: expand a validated spec lazily into keyed runs, estimate their cost, shard them (no torch)."""
