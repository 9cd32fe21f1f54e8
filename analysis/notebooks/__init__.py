"""The notebooks, kept as jupytext percent scripts (<name>.py) paired with <name>.ipynb, and the
helpers they share."""
