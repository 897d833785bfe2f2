"""``python -m param_compute.ab``: ``param-compute ab`` (``cli.main``)."""
from param_compute.cli.ab import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.ab")
