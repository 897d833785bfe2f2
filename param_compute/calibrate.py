"""``python -m param_compute.calibrate``: entry point (the real module is runtime.calibrate)."""

import sys

from param_compute.runtime.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
