"""``python -m param_compute.workload_totals``: ``param-compute totals`` (``cli.main``)."""
from param_compute.analysis.workload_totals import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.workload_totals")
