"""``python -m param_compute.exporters``: the entry point.

The code: ``param_compute.results.sinks.export``.
"""

import sys

from param_compute.results.sinks.export import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
