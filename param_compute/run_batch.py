"""``python -m param_compute.run_batch``: entry point; the code is in ``param_compute.profiling.batch_child``."""

import sys

from param_compute.profiling.batch_child import main

if __name__ == "__main__":
    sys.exit(main())
