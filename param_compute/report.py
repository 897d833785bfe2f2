"""``python -m param_compute.report``: the entry point.

The code: ``param_compute.results.report``.
"""

import sys

from param_compute.results.report import main

if __name__ == "__main__":
    sys.exit(main())
