"""Experiment trackers (TensorBoard, MLflow, Weights & Biases) as live views of a run's tables.

The parquet tables stay the record. The process that writes the rows (`RunStore.append`) hands
them to a `TrackingSession` (session.py), which turns them into points (points.py) and queues them
for a background thread (writer.py) that writes every backend (one module each), so a slow or
broken tracker never stalls the loop and never loses a row of the run directory.
"""
