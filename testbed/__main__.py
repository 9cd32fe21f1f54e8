"""`python -m testbed COMMAND ...`: the `testbed` command (testbed/cli/main.py); nothing imports
this file."""

import sys

from testbed.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
