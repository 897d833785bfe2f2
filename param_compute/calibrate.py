"""``python -m param_compute.calibrate``: the entry point (the code: ``measure.calibrate``)."""

import sys

from param_compute.measure.calibrate import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
