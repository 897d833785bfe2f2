"""``python -m param_compute.tools.nsys_report``: the entry point.

The code: ``param_compute.profiling.nsys_report``.
"""

import sys

from param_compute.profiling.nsys_report import main

if __name__ == "__main__":
    sys.exit(main())
