"""`python -m testbed.study SCENARIO.yaml`: starts the study CLI (testbed/cli/study.py); nothing
imports this file."""

import sys

from testbed.cli.study import main

if __name__ == "__main__":
    sys.exit(main(reexec=True))
