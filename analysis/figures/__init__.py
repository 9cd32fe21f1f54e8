"""Every figure of the report and the notebooks."""
