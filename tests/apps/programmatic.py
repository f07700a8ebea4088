"""Serves the basic app through ``rush.run`` (``python -m tests.apps.programmatic FD``)."""

import sys

import rush

from tests.apps.basic import app

if __name__ == "__main__":
    sys.exit(rush.run(app, fd=int(sys.argv[1]), graceful_timeout=5))
