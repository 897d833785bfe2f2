"""``python -m param_compute.capture``: ``param-compute capture`` (``cli.main``)."""
from param_compute.cli.capture import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.capture")
