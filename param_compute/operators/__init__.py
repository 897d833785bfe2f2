"""Stage 3a, operators: which names a spec may run; adapters making torch callables ops."""
