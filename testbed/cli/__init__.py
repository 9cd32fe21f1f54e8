"""The entry points: the `testbed` command, `testbed run|sweep|report|judge-server|export`
(main.py; also `python -m testbed`), and the `python -m testbed.run` / `python -m testbed.sweep`
forms. The top floor: nothing in the package imports it."""
