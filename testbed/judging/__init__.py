"""The judging glue: building a scenario's judges from its `judge:` section (build.py) and
adapting a user's judge to the batch protocol (adapter.py). The judges themselves live in the
top-level `judges/` package."""
