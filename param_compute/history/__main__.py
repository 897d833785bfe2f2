"""``python -m param_compute.history``: the entry point.

The code: ``param_compute.cli.history``.
"""

import sys

from param_compute.cli.history import main

if __name__ == "__main__":
    sys.exit(main())
