"""testbed: non-stationary writing environments, judges and trainers (README.md)."""

# First thing, before anything loads torch: pin the CPU kernels of TESTBED_NUMERICS (default
# portable), so a seed writes the same rows on every x86-64 processor (testbed/cpu_numerics.py).
from testbed.cpu_numerics import apply_environment as _apply_numerics

_apply_numerics()
