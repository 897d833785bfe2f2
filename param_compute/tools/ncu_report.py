"""``python -m param_compute.tools.ncu_report``: entry point; the code is in ``param_compute.profiling.ncu_report``."""

import sys

from param_compute.profiling.ncu_report import main

if __name__ == "__main__":
    sys.exit(main())
