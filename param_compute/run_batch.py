"""``python -m param_compute.run_batch``: the entry point.

The code: ``param_compute.profiling.batch_child``.
"""

import sys

from param_compute.profiling.batch_child import main

if __name__ == "__main__":
    sys.exit(main())
