"""Serves the basic app through ``rush.run`` with two workers forked from this
process's object (``preload=True``): ``python -m tests.apps.programmatic_preloaded FD MARKER``.
Each import of this module appends a line to MARKER, so the test can tell
that the workers did not import it again."""

import sys

import rush

from tests.apps.basic import app

if __name__ == "__main__":
    with open(sys.argv[2], "a") as marker:
        marker.write("imported\n")
    sys.exit(rush.run(app, fd=int(sys.argv[1]), workers=2, preload=True, graceful_timeout=5))
