"""A module whose ``app`` is not a rush.App."""

app = 42
