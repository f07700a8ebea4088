"""The benchmark endpoints as a plain WSGI (PEP 3333) app: granian's WSGI mode, bjoern, fastwsgi,
gunicorn, and rush's WSGI interface (``rush benches.apps.wsgi_app:app --interface wsgi``) all serve it.

No framework, for the same reason as the ASGI app: the server is measured, not
a router. Header lists are built once; every response carries its
Content-Length, which lets every server keep the connection alive without
chunking.
"""

import json
from urllib.parse import parse_qs

HELLO = b"Hello, World!"
TEXT = "text/plain; charset=utf-8"
HELLO_HEADERS = [("Content-Type", TEXT), ("Content-Length", str(len(HELLO)))]
REDIRECT_HEADERS = [("Location", "/egg"), ("Content-Length", "0")]
NOT_FOUND = b"Not Found"
NOT_FOUND_HEADERS = [("Content-Type", TEXT), ("Content-Length", str(len(NOT_FOUND)))]


GENERATED = b"g" * 1024


def generated():
    yield GENERATED


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/generated":
        start_response("200 OK", [("Content-Type", TEXT)])
        return generated()
    if path == "/":
        start_response("200 OK", HELLO_HEADERS)
        return [HELLO]
    if path == "/hello":
        name = parse_qs(environ.get("QUERY_STRING", "")).get("name", ["world"])[0]
        body = f"Hello, {name}".encode()
        start_response("200 OK", [("Content-Type", TEXT), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/json":
        body = json.dumps({"message": "Hello, World!"}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/easter":
        start_response("301 Moved Permanently", REDIRECT_HEADERS)
        return [b""]
    start_response("404 Not Found", NOT_FOUND_HEADERS)
    return [NOT_FOUND]
