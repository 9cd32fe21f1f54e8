"""`python -m testbed.sweep SWEEP.yaml`: starts the sweep CLI (testbed/cli/sweep.py); nothing
imports this file."""

import sys

from testbed.cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
