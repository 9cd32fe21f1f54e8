"""`python -m testbed.sweep SWEEP.yaml`: starts the sweep CLI (testbed/cli/sweep_command.py); nothing
imports this file."""

import sys

from testbed.cli.sweep_command import main

if __name__ == "__main__":
    sys.exit(main())
