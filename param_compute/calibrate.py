"""``python -m param_compute.calibrate``: the entry point (the code: ``runtime.calibrate``)."""

import sys

from param_compute.runtime.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
