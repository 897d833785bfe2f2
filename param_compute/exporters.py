"""``python -m param_compute.exporters``: ``param-compute export`` (``cli.main``)."""
from param_compute.results.sinks.export import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.exporters")
