"""Realignment metrics per switch and segment, from a run's tables."""
