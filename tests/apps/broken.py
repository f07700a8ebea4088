"""An app module that fails while being imported."""

raise RuntimeError("tests.apps.broken fails to import on purpose")
