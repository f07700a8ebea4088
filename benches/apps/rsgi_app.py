"""The benchmark endpoints as an RSGI app (granian's native interface, its fastest).

RSGI's ``response_str``/``response_bytes`` write a whole response in one call,
the cheapest path granian offers a Python app.
"""

import json
from urllib.parse import parse_qs

TEXT_HEADERS = [("content-type", "text/plain; charset=utf-8")]
JSON_HEADERS = [("content-type", "application/json")]
REDIRECT_HEADERS = [("location", "/egg")]


async def app(scope, protocol):
    path = scope.path
    if path == "/":
        protocol.response_str(200, TEXT_HEADERS, "Hello, World!")
    elif path == "/hello":
        name = parse_qs(scope.query_string).get("name", ["world"])[0]
        protocol.response_str(200, TEXT_HEADERS, f"Hello, {name}")
    elif path == "/json":
        protocol.response_str(200, JSON_HEADERS, json.dumps({"message": "Hello, World!"}))
    elif path == "/easter":
        protocol.response_empty(301, REDIRECT_HEADERS)
    else:
        protocol.response_str(404, TEXT_HEADERS, "Not Found")
