"""``python -m param_compute.run_benchmark``: the entry point.

The code: ``param_compute.cli.run_benchmark``.
"""

import sys

from param_compute.cli.run_benchmark import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
