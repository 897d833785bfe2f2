"""``python -m param_compute.exporters``: entry point; the code is in ``param_compute.results.sinks.export``."""

import sys

from param_compute.results.sinks.export import main

if __name__ == "__main__":
    sys.exit(main())
