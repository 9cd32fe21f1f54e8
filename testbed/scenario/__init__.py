"""The scenario: its pydantic schema (schema.py), the strict YAML loader (loading.py) and the
plugin sections that name an implementation with its arguments (plugins.py)."""
