"""A WSGI app that reports what one request can see of another (tests/differential/test_diff_isolation.py).

Every answer is JSON; each endpoint reports what the request found, then
leaves a mark of its own for the next request to find:

* ``/ctx?set=X``: the ContextVar ``request_var`` as found (``"unset"`` when
  clean), then sets it to ``X``.
* ``/local?set=X``: the ``threading.local`` attribute ``value`` as found, then sets it.
* ``/environ``: whether an earlier request's marks are in this environ (a key
  of its own, a changed ``PATH_INFO`` and a changed ``wsgi.errors``), then leaves them.
* ``/raise`` fails; ``/exception`` answers the exception being handled when it
  runs (none, unless one leaked out of an earlier request).
* ``/read?n=N``: reads ``N`` bytes of the body (all with no ``n``) and answers them.
"""

from __future__ import annotations

import contextvars
import io
import json
import sys
import threading
from urllib.parse import parse_qs

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")
local = threading.local()
# The wsgi.errors a request replaced, so the next can tell whether it got it.
replaced_errors: list[object] = []


def app(environ, start_response):
    query = {key: values[-1] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ["PATH_INFO"]
    if path == "/ctx":
        answer = {"request_var": request_var.get()}
        if "set" in query:
            request_var.set(query["set"])
    elif path == "/local":
        answer = {"local": getattr(local, "value", "unset")}
        if "set" in query:
            local.value = query["set"]
    elif path == "/environ":
        answer = {
            "key": "isolation.mark" in environ,
            "errors": any(environ["wsgi.errors"] is errors for errors in replaced_errors),
        }
        environ["isolation.mark"] = True
        environ["PATH_INFO"] = "/changed"
        replaced_errors.append(io.StringIO())
        environ["wsgi.errors"] = replaced_errors[-1]
    elif path == "/raise":
        raise RuntimeError("raised on purpose")
    elif path == "/exception":
        answer = {"handling": repr(sys.exc_info()[1])}
    elif path == "/read":
        size = int(query["n"]) if "n" in query else -1
        answer = {"read": environ["wsgi.input"].read(size).decode("latin-1")}
    else:
        answer = {"path": path}
    body = json.dumps(answer, sort_keys=True).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
