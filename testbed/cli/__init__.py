"""The entry points: `testbed run|sweep|report|judge-server` (main.py) and the `python -m
testbed.run` / `python -m testbed.sweep` forms. The top floor: nothing in the package imports it."""
