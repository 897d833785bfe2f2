"""``python -m param_compute.report``: entry point; the code is in ``param_compute.results.report``."""

import sys

from param_compute.results.report import main

if __name__ == "__main__":
    sys.exit(main())
