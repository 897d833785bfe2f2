"""``python -m param_compute.compare``: the entry point.

The code: ``param_compute.results.compare``.
"""

import sys

from param_compute.results.compare import main

if __name__ == "__main__":
    sys.exit(main())
