"""``python -m param_compute.run_batch``: the entry point.

The code: ``param_compute.profiling.batch_child``.
"""

import sys

from param_compute.profiling.batch_child import main
from param_compute.process.entry import run

if __name__ == "__main__":
    sys.exit(run(main))
