"""``python -m param_compute.compare``: ``param-compute compare`` (``cli.main``)."""
from param_compute.analysis.compare import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.compare")
