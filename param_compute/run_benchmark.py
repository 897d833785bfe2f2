"""``python -m param_compute.run_benchmark``: ``param-compute run`` (``cli.main``)."""
from param_compute.cli.run_benchmark import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.run_benchmark")
