"""``python -m param_compute.calibrate``: ``param-compute calibrate`` (``cli.main``)."""
from param_compute.measure.calibrate import main  # noqa: F401  (its main, as before)
from param_compute.cli.main import door

if __name__ == "__main__":
    door("param_compute.calibrate")
