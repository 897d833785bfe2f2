"""``python -m param_compute.ab``: the entry point.

The code: ``param_compute.cli.ab``.
"""

import sys

from param_compute.cli.ab import main

if __name__ == "__main__":
    sys.exit(main())
