"""``python -m param_compute.history``: ``param-compute history`` (``cli.main``)."""
from param_compute.cli.history import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.history")
