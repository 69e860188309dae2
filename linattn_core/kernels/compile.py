"""`python -m linattn_core.kernels.compile`: the compile check's command (`tools/compile.py`)."""

import sys

from linattn_core.kernels.tools.compile import main

if __name__ == "__main__":
    sys.exit(main())
