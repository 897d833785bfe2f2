"""``python -m param_compute.tools.nsys_report``: ``param-compute nsys`` (``cli.main``)."""
from param_compute.profiling.nsys_report import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.tools.nsys_report")
