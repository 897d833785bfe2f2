"""``python -m param_compute.workload_totals``: the entry point.

The code: ``param_compute.results.workload_totals``.
"""

import sys

from param_compute.results.workload_totals import main

if __name__ == "__main__":
    sys.exit(main())
