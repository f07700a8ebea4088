"""Runs the WSGI benchmark app on bjoern: ``python -m benches.apps.bjoern_server --host H --port P``.

bjoern has no command line of its own; ``bjoern.run`` is its whole API (one
process, one thread, libev underneath).
"""

import argparse

import bjoern

from benches.apps.wsgi_app import app

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    bjoern.run(app, arguments.host, arguments.port)
