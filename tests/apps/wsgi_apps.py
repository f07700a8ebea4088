"""WSGI apps for tests/test_wsgi.py (served with ``rush tests.apps.wsgi_apps:<name>``).

* ``app``: a plain function, so auto-detected as WSGI, dispatching on PATH_INFO:

  - ``/environ...``: the environ as JSON (str, bool, int and None values as
    they are, tuples as lists, anything else by type name), plus
    ``input_methods`` and ``errors_methods``;
  - ``/echo``: the request body read from ``wsgi.input`` (``?size=N`` reads
    it in pieces of N bytes and also tries reading past the end);
  - ``/lines``: the body read with ``readline()``, ``readlines()`` and iteration;
  - ``/errors?marker=...``: writes the marker to ``wsgi.errors``;
  - ``/exc-info``: ``start_response`` again with ``exc_info`` (a 500 with its own body);
  - ``/twice``: ``start_response`` twice without ``exc_info`` (an app error);
  - ``/write``: the legacy ``write()`` callable, then a returned iterable;
  - ``/lazy-start``: a generator body that calls ``start_response`` once iterated;
  - ``/exc-info-late``: ``start_response`` with ``exc_info`` after the head went out;
  - ``/closing?id=X[&fail=1]``: an iterable with ``close()`` counted in
    ``closes[X]`` (``fail`` raises during iteration); ``/closed?id=X``: the count;
  - ``/length?declared=N&actual=M``: a Content-Length that does not match the body;
  - ``/crlf?where=name|value|status``: CR/LF in a header or the status;
  - ``/padded-header``: a header value with spaces and a tab around it;
  - ``/file?path=...[&offset=N][&declare=1]``: ``wsgi.file_wrapper`` over an open file;
    ``/file-bytesio``: the wrapper over a BytesIO (no file descriptor);
  - ``/block?key=K``: waits (on a pool thread, with ``--threads``) until
    ``/release?key=K``; ``/entered?key=K`` tells whether it started waiting;
    ``/thread``: the name of the thread running the app;
  - ``/big?size=N``: N bytes produced by a generator;
  - ``/cookies``: repeated Set-Cookie headers; ``/latin1-header``: a
    non-ASCII (latin-1) header value; ``/non-latin1-header``: one beyond latin-1; ``/no-start``: never calls
    ``start_response``; ``/raise``: raises; ``/status?code=...``: that status line;
  - anything else: 404 with ``{"path": PATH_INFO, "script_name": SCRIPT_NAME}``.

* ``instance_app``: a class instance with a (sync) ``__call__``, also WSGI.
* ``validated``: a strictly compliant app wrapped in ``wsgiref.validate.validator``
  (its warnings are errors), with ``/``, ``/echo``, ``/lines``, ``/file?path=``,
  ``/big?size=`` and ``/iter``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import threading
import warnings
import wsgiref.validate
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

# Held requests wait at most this long (a failure guard, never reached in a passing test).
BLOCK_LIMIT = 30.0

closes: dict[str, int] = {}
events: dict[str, threading.Event] = {}
entered: set[str] = set()
kept: list[Any] = []
lock = threading.Lock()


def query(environ: Environ) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}


def event(key: str) -> threading.Event:
    with lock:
        return events.setdefault(key, threading.Event())


def json_response(start_response: StartResponse, value: Any, status: str = "200 OK") -> list[bytes]:
    body = json.dumps(value).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def text_response(start_response: StartResponse, text: str | bytes, status: str = "200 OK") -> list[bytes]:
    body = text.encode() if isinstance(text, str) else text
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def describe_environ(environ: Environ) -> dict[str, Any]:
    described: dict[str, Any] = {}
    for key, value in environ.items():
        if isinstance(value, str | bool | int) or value is None:
            described[key] = value
        elif isinstance(value, tuple):
            described[key] = list(value)
        elif key == "rush.proxy_protocol":
            described[key] = value  # plain JSON data (--proxy-protocol's TLVs)
        else:
            described[key] = type(value).__name__
    described["path"] = environ["PATH_INFO"]
    described["input_methods"] = [
        name for name in ("read", "readline", "readlines", "__iter__") if hasattr(environ["wsgi.input"], name)
    ]
    described["errors_methods"] = [
        name for name in ("write", "writelines", "flush") if hasattr(environ["wsgi.errors"], name)
    ]
    described["file_wrapper_callable"] = callable(environ.get("wsgi.file_wrapper"))
    return described


def read_body(environ: Environ) -> bytes:
    length = environ.get("CONTENT_LENGTH")
    if length:
        return environ["wsgi.input"].read(int(length))
    # No Content-Length (a chunked request): wsgi.input_terminated lets us read to the end.
    return environ["wsgi.input"].read()


class ClosingIterable:
    """An iterable whose close() is counted under ``key``."""

    def __init__(self, key: str, chunks: list[bytes], fail: bool) -> None:
        self.key = key
        self.chunks = chunks
        self.fail = fail

    def __iter__(self) -> Iterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if self.fail and index == 1:
                raise RuntimeError("failing in the middle of the body")
            yield chunk

    def close(self) -> None:
        with lock:
            closes[self.key] = closes.get(self.key, 0) + 1


def lazy_start(start_response: StartResponse) -> Iterator[bytes]:
    """A body that calls start_response only once iterated (PEP 3333 allows it up to the first
    chunk), as WSGI middleware written as generators does."""
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"lazy "
    yield b"start"


def exc_info_after_head(start_response: StartResponse) -> Iterator[bytes]:
    """Fails once its head and first chunk are out, and calls start_response with exc_info as
    PEP 3333 shows: the server must re-raise (it cannot replace a response already sent)."""
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"begun "
    try:
        raise ValueError("failed after the head was sent")
    except ValueError:
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
    yield b"never sent"


def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    params = query(environ)
    if path.startswith("/environ"):
        return json_response(start_response, describe_environ(environ))
    if path == "/echo":
        if "size" in params:
            size = int(params["size"])
            stream = environ["wsgi.input"]
            pieces = []
            while piece := stream.read(size):
                pieces.append(piece)
            body = b"".join(pieces)
            after = stream.read(size)
            return json_response(
                start_response,
                {
                    "pieces": [len(piece) for piece in pieces],
                    "after_end": after.decode(),
                    "sha256": hashlib.sha256(body).hexdigest(),
                    "length": len(body),
                },
            )
        body = read_body(environ)
        return json_response(
            start_response,
            {
                "length": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "head": body[:64].decode("latin-1"),
                "content_length": environ.get("CONTENT_LENGTH"),
                "content_type": environ.get("CONTENT_TYPE"),
            },
        )
    if path == "/lines":
        stream = environ["wsgi.input"]
        first = stream.readline()
        second = stream.readline(3)
        rest = stream.readlines()
        return json_response(start_response, [line.decode() for line in [first, second, *rest]])
    if path == "/input":
        # Everything a file offers, in an order that would expose a reader
        # whose position, or closing, carried over to the next request.
        stream = environ["wsgi.input"]
        buffer = bytearray(4)
        report = {
            "readinto": stream.readinto(buffer),
            "read": stream.read(3).decode("latin-1"),
            "readline": stream.readline().decode("latin-1"),
            "rest": stream.read().decode("latin-1"),
            "iterated": [line.decode("latin-1") for line in stream],
            "readlines": [line.decode("latin-1") for line in stream.readlines()],
            "at_end": stream.read(10).decode("latin-1"),
        }
        if "spoil" in params:
            stream.seek(0, 2)
            stream.close()
        return json_response(start_response, report)
    if path == "/keep-start-response":
        # An app that holds on to its start_response (or its write) after
        # returning: a later request must not be handed the same object.
        write = start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        kept.append(write if "write" in params else start_response)
        return [b"kept"]
    if path == "/use-kept":
        previous = kept.pop()
        try:
            previous("500 Oops", [("X-Stolen", "yes")]) if "write" not in params else previous(b"stolen")
            reused_call = "accepted"
        except RuntimeError:
            reused_call = "refused"
        return json_response(start_response, {"same": previous is start_response, "reused_call": reused_call})
    if path == "/lines-iter":
        return json_response(start_response, [line.decode() for line in environ["wsgi.input"]])
    if path == "/errors":
        environ["wsgi.errors"].write(f"wsgi.errors says {params['marker']}\n")
        environ["wsgi.errors"].writelines(["second line ", f"{params['marker']}-2\n"])
        environ["wsgi.errors"].flush()
        return text_response(start_response, "written")
    if path == "/exc-info":
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-First", "yes")])
        try:
            raise ValueError("something failed after start_response")
        except ValueError:
            start_response(
                "503 Service Unavailable", [("Content-Type", "text/plain"), ("X-Replaced", "yes")], sys.exc_info()
            )
        return [b"replaced by the exc_info response"]
    if path == "/twice":
        start_response("200 OK", [("Content-Type", "text/plain")])
        start_response("201 Created", [("Content-Type", "text/plain")])
        return [b"should never be sent"]
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"hello ")
        write(b"legacy ")
        return [b"world"]
    if path == "/lazy-start":
        return lazy_start(start_response)
    if path == "/exc-info-late":
        return exc_info_after_head(start_response)
    if path == "/closing":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ClosingIterable(params["id"], [b"one ", b"two ", b"three"], fail="fail" in params)
    if path == "/closed":
        with lock:
            return json_response(start_response, {"closes": closes.get(params["id"], 0)})
    if path == "/length":
        body = b"x" * int(params["actual"])
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", params["declared"])])
        return [body]
    if path == "/padded-header":
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Padded", " \tspaced value\t ")])
        return [b"padded"]
    if path == "/crlf":
        where = params["where"]
        if where == "name":
            start_response("200 OK", [("Content-Type", "text/plain"), ("X-Bad\r\nX-Injected", "1")])
        elif where == "value":
            start_response("200 OK", [("Content-Type", "text/plain"), ("X-Bad", "ok\r\nX-Injected: 1")])
        else:
            start_response("200 OK\r\nX-Injected: 1", [("Content-Type", "text/plain")])
        return [b"crlf"]
    if path == "/file":
        # The server closes it, through the wrapper.
        handle = open(params["path"], "rb")
        handle.seek(int(params.get("offset", "0")))
        headers = [("Content-Type", "application/octet-stream")]
        if "declare" in params:
            headers.append(("Content-Length", str(os.fstat(handle.fileno()).st_size - handle.tell())))
        start_response("200 OK", headers)
        return environ["wsgi.file_wrapper"](handle, 32768)
    if path == "/file-bytesio":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return environ["wsgi.file_wrapper"](io.BytesIO(b"from a BytesIO " * 1000), 4096)
    if path == "/block":
        key = params["key"]
        with lock:
            entered.add(key)
        released = event(key).wait(BLOCK_LIMIT)
        return text_response(start_response, f"released {key}" if released else "never released")
    if path == "/entered":
        with lock:
            return json_response(start_response, {"entered": params["key"] in entered})
    if path == "/release":
        event(params["key"]).set()
        return text_response(start_response, "ok")
    if path == "/thread":
        return text_response(start_response, threading.current_thread().name)
    if path == "/big":
        size = int(params["size"])

        def produce() -> Iterator[bytes]:
            block = bytes(range(256)) * 256
            sent = 0
            while sent < size:
                piece = block[: min(len(block), size - sent)]
                sent += len(piece)
                yield piece

        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return produce()
    if path == "/cookies":
        start_response(
            "200 OK", [("Content-Type", "text/plain"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Other", "z")]
        )
        return [b"cookies"]
    if path == "/latin1-header":
        # PEP 3333: header values are str holding latin-1 characters, sent as those bytes.
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Latin", "caf\u00e9 \u00ff")])
        return [b"latin-1"]
    if path == "/non-latin1-header":
        # Not representable in latin-1: an app error (PEP 3333).
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Check", "\u2713")])
        return [b"not latin-1"]
    if path == "/no-start":
        return [b"no start_response"]
    if path == "/raise":
        raise RuntimeError("the app failed")
    if path == "/status":
        start_response(params["code"], [("Content-Type", "text/plain")])
        return [] if params["code"].startswith(("204", "304")) else [b"status"]
    return json_response(
        start_response, {"path": path, "script_name": environ.get("SCRIPT_NAME")}, status="404 Not Found"
    )


class InstanceApp:
    """A WSGI app that is an object with a synchronous ``__call__``."""

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        return text_response(start_response, f"instance app at {environ['PATH_INFO']}")


instance_app = InstanceApp()


# ---------------------------------------------------------------------------
# A strictly compliant app under wsgiref.validate

warnings.simplefilter("error", wsgiref.validate.WSGIWarning)


def compliant(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    params = query(environ)
    if path == "/":
        body = b"hello from a validated app"
    elif path == "/echo":
        stream = environ["wsgi.input"]
        digest = hashlib.sha256()
        length = 0
        # wsgi.input_terminated: reading until b"" is fine, with or without Content-Length.
        while chunk := stream.read(65536):
            digest.update(chunk)
            length += len(chunk)
        body = json.dumps(
            {"length": length, "sha256": digest.hexdigest(), "content_length": environ.get("CONTENT_LENGTH", "")}
        ).encode()
    elif path == "/lines":
        stream = environ["wsgi.input"]
        lines = [stream.readline(), stream.readline(65536)]
        lines += list(stream)
        body = json.dumps([line.decode() for line in lines]).encode()
    elif path == "/file":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        # Closed by the server, through the wrapper (and the validator's iterator wrapper).
        return environ["wsgi.file_wrapper"](open(params["path"], "rb"), 65536)
    elif path == "/big":
        body = b"v" * int(params["size"])
    elif path == "/iter":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"it", b"er", b"ated"])
    else:
        body = b"not found"
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


validated = wsgiref.validate.validator(compliant)
