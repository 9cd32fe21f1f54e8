"""The tables the report writes and prints: markdown, console, the verdict lines."""
