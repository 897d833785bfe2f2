"""``python -m param_compute.compare``: entry point; the code is in ``param_compute.results.compare``."""

import sys

from param_compute.results.compare import main

if __name__ == "__main__":
    sys.exit(main())
