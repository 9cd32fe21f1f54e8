"""`python -m testbed.study SCENARIO.yaml`: starts the study CLI (testbed/cli/study_command.py); nothing
imports this file."""

import sys

from testbed.cli.study_command import main

if __name__ == "__main__":
    sys.exit(main(reexec=True))
