"""The simulated runtime (`runtime.kind: simulated`): an asynchronous cluster modelled in simulated
seconds (cluster.py, latency.py), running the real policy, judge and trainer (runner.py)."""
