"""``python -m param_compute.history``: the entry point.

The code: ``param_compute.cli.history``.
"""

import sys

from param_compute.cli.history import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
