"""``python -m param_compute.workload_totals``: the entry point.

The code: ``param_compute.analysis.workload_totals``.
"""

import sys

from param_compute.analysis.workload_totals import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
