"""``python -m param_compute.tools.ncu_report``: the entry point.

The code: ``param_compute.profiling.ncu_report``.
"""

import sys

from param_compute.profiling.ncu_report import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
