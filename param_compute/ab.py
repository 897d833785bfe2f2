"""``python -m param_compute.ab``: the entry point.

The code: ``param_compute.cli.ab``.
"""

import sys

from param_compute.cli.ab import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
