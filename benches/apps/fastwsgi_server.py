"""Runs the WSGI benchmark app on fastwsgi: ``python -m benches.apps.fastwsgi_server --host H --port P``.

fastwsgi (libuv and llhttp underneath) is started from Python with
``fastwsgi.run``; it serves on one thread of one process.
"""

import argparse

import fastwsgi

from benches.apps.wsgi_app import app

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    fastwsgi.run(wsgi_app=app, host=arguments.host, port=arguments.port)
