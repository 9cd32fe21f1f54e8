"""The statistics of paired comparisons: intervals, tests, power (pure functions)."""
