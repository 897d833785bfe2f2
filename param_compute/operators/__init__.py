"""Stage 3a, operators: which names a spec may run, and adapters that make torch callables operators."""
