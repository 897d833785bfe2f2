"""``python -m param_compute.run_batch``: ``param-compute batch`` (``cli.main``)."""
from param_compute.profiling.batch_child import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.run_batch")
