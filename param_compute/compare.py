"""``python -m param_compute.compare``: the entry point.

The code: ``param_compute.analysis.compare``.
"""

import sys

from param_compute.analysis.compare import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
