"""``python -m param_compute.tools.ncu_report``: ``param-compute ncu`` (``cli.main``)."""
from param_compute.profiling.ncu_report import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.tools.ncu_report")
