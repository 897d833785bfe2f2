"""``python -m param_compute.merge``: the entry point.

The code: ``param_compute.analysis.merge``.
"""

import sys

from param_compute.analysis.merge import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
