"""``python -m param_compute``: the ``param-compute`` command (``cli.main``)."""
import sys

from param_compute.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
