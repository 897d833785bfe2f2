"""Process-level facilities any stage may use: signals held around writes, children tied to the run."""
