"""``python -m param_compute.calibrate``: the entry point (the code: ``runtime.calibrate``)."""

import sys

from param_compute.runtime.calibrate import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
