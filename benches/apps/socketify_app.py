"""The benchmark endpoints on socketify's native API (its fastest, above its WSGI and ASGI layers):
``python -m benches.apps.socketify_app --host H --port P``.

``res.send`` writes status, content type and body in one call into uWebSockets;
the catch-all route gives the 404.
"""

import argparse
import json

from socketify import App

# socketify hands these straight to C: bytes, not str (a str content type fails inside `send`).
TEXT = b"text/plain; charset=utf-8"


def index(res, req):
    res.send(b"Hello, World!", content_type=TEXT)


def hello(res, req):
    res.send(f"Hello, {req.get_query('name') or 'world'}", content_type=TEXT)


def json_message(res, req):
    res.send(json.dumps({"message": "Hello, World!"}), content_type=b"application/json")


def easter(res, req):
    res.redirect("/egg", 301)


def not_found(res, req):
    res.send(b"Not Found", content_type=TEXT, status=404)


def build_app() -> App:
    app = App()
    app.get("/", index)
    app.get("/hello", hello)
    app.get("/json", json_message)
    app.get("/easter", easter)
    app.any("/*", not_found)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    app = build_app()
    app.listen({"host": arguments.host, "port": arguments.port})
    app.run()
