"""``python -m param_compute.capture``: the entry point.

The code: ``param_compute.cli.capture``.
"""

import sys

from param_compute.cli.capture import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
