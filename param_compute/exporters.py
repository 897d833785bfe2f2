"""``python -m param_compute.exporters``: the entry point.

The code: ``param_compute.results.sinks.export``.
"""

import sys

from param_compute.results.sinks.export import main

if __name__ == "__main__":
    sys.exit(main())
