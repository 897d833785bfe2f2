"""``python -m param_compute.capture``: the entry point.

The code: ``param_compute.cli.capture``.
"""

import sys

from param_compute.cli.capture import main

if __name__ == "__main__":
    sys.exit(main())
