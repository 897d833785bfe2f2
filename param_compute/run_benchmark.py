"""``python -m param_compute.run_benchmark``: entry point; the code is in ``param_compute.cli.run_benchmark``."""

import sys

from param_compute.cli.run_benchmark import main

if __name__ == "__main__":
    sys.exit(main())
