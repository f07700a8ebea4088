"""A raw WSGI app (PEP 3333) for the spec's corners.

* ``/readline``: reads ``wsgi.input`` with ``readline()`` (also with a size).
* ``/iterate``: iterates ``wsgi.input`` line by line.
* ``/tls``: the scheme and the mod_ssl-style TLS variables of the environ.
* ``/raise``: fails before calling ``start_response``.
* ``/write``: sends part of the body through the ``write()`` callable that
  ``start_response`` returns, the rest as the returned iterable.
* ``/closing``: a body object with ``close()``, streamed in three chunks.
* ``/exc-info``: fails after ``start_response`` and calls it again with
  ``exc_info`` before any byte is sent, replacing the response with a 500.
* ``/exc-info-late``: the same after the headers went out: PEP 3333 says
  ``start_response`` re-raises, and the server can only cut the response.
"""

from __future__ import annotations

import json
import sys


class Chunks:
    """An iterable body with close(), as PEP 3333 describes."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.closed = False

    def __iter__(self):
        yield from self.chunks

    def close(self):
        self.closed = True


def app(environ, start_response):
    path = environ["PATH_INFO"]
    stream = environ["wsgi.input"]
    if path == "/readline":
        lines = [stream.readline(4)]
        while line := stream.readline():
            lines.append(line)
        body = json.dumps([line.decode("latin-1") for line in lines]).encode()
    elif path == "/iterate":
        body = json.dumps([line.decode("latin-1") for line in stream]).encode()
    elif path == "/tls":
        keys = ("wsgi.url_scheme", "HTTPS", "SSL_PROTOCOL", "SSL_CIPHER")
        body = json.dumps({key: environ.get(key) for key in keys}).encode()
    elif path == "/raise":
        raise RuntimeError("failed before start_response")
    elif path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written ")
        write(b"twice ")
        return [b"then returned"]
    elif path == "/closing":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Chunks([b"a", b"b", b"c"])
    elif path == "/exc-info":
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise ValueError("failed after start_response")
        except ValueError:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"replaced"]
    elif path == "/exc-info-late":
        return late_failure(start_response)
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def late_failure(start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"begun "
    try:
        raise ValueError("failed mid-body")
    except ValueError:
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
    yield b"never sent"
