"""``python -m param_compute.workload_totals``: entry point; the code is in ``param_compute.results.workload_totals``."""

import sys

from param_compute.results.workload_totals import main

if __name__ == "__main__":
    sys.exit(main())
