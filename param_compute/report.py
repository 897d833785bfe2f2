"""``python -m param_compute.report``: the entry point.

The code: ``param_compute.analysis.report``.
"""

import sys

from param_compute.analysis.report import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
