"""`python -m testbed.run SCENARIO.yaml`: the entry the README names. The CLI lives in
testbed/cli/run_command.py; this file only starts it, and nothing imports it."""

import sys

from testbed.cli.run_command import main

if __name__ == "__main__":
    sys.exit(main(reexec=True))
