"""The differential suite's corpus: apps written the way each framework's docs show them.

Each module is served unchanged under rush and under the reference server
(tests/differential/harness.py); nothing in them knows which server runs them.
"""
