"""The differential suite's machinery: one app under rush and under the reference server, compared.

* `start_pair` starts the same corpus app twice, once under rush and once under
  the reference server (uvicorn with httptools and uvloop for ASGI, gunicorn
  for WSGI), each through `recorder.py`, which writes what the app sees into a
  file per server. Both run one worker, on sockets the test binds (``--fd``).
* A test runs the same client script against both `Side`s, turns what the
  client saw into a plain dict (`response_view`, `curl_view`...) and what the app
  saw into another (`asgi_app_view`, `wsgi_app_view`, from the records of its
  ``x-diff-id``), and calls `Pair.compare`, which flattens both dicts
  into ``path -> value`` and fails on every path whose values differ, unless
  ``deliberate.toml`` lists that path (a glob over ``app/case/path``) with the
  reason rush differs on purpose.
* What is never compared: the fields each server owns (`SERVER_OWNED`), ports
  (`mask_ports`), values that hold the clock (`mask_clock`: the timestamp and signature of a
  signed value, a cookie's expiry), and transport accidents such as how a request body was split into
  ``http.request`` messages (`merge_body_messages`).
"""

from __future__ import annotations

import fnmatch
import json
import re
import socket
import struct
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support import RUSH, VENV_BIN, Connection, RushServer, ServerFactory, clean_environment, request, wait_for

HERE = Path(__file__).resolve().parent
DELIBERATE_FILE = HERE / "deliberate.toml"

# Response fields that belong to the server rather than to the app: each server writes its own (or
# none), and none of them is something an app asked for. Framing (Content-Length or chunked) is
# compared separately, as `framing`.
SERVER_OWNED = frozenset({"date", "server", "connection", "keep-alive", "transfer-encoding"})


def listed(entry: dict[str, Any], where: str, rush_value: Any, reference_value: Any) -> bool:
    """Whether a deliberate.toml entry covers this difference: its glob matches the path, and its
    optional ``rush`` / ``reference`` values (``"<absent>"`` for a missing field) match too."""
    if not fnmatch.fnmatchcase(where, entry["match"]):
        return False
    return entry.get("rush", rush_value) == rush_value and entry.get("reference", reference_value) == reference_value


def load_deliberate() -> list[dict[str, Any]]:
    entries = tomllib.loads(DELIBERATE_FILE.read_text()).get("difference", [])
    for entry in entries:
        assert entry.get("match") and entry.get("reason"), f"deliberate.toml entry without match or reason: {entry}"
    return entries


DELIBERATE = load_deliberate()
# The `match` of every entry that covered a difference in this session (see test_zz_deliberate.py).
MATCHED: set[str] = set()


# ---------------------------------------------------------------------------
# Servers


@dataclass
class Side:
    """One server of a pair: rush, uvicorn or gunicorn, and the file its app records into."""

    name: str
    server: RushServer
    record_path: Path

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def address(self) -> Any:
        return self.server.address

    def connect(self, timeout: float = 15.0, rcvbuf: int | None = None) -> Connection:
        return self.server.connect(timeout, rcvbuf)

    def events(self, tag: str) -> list[dict[str, Any]]:
        """What the app recorded for requests tagged ``tag`` (the x-diff-id header, else the path)."""
        if not self.record_path.exists():
            return []
        # The server may be writing a line as it is read: only lines that
        # end in a newline are whole.
        lines = self.record_path.read_text().split("\n")[:-1]
        return [record["event"] for record in map(json.loads, lines) if record["tag"] == tag]

    def wait_events(self, tag: str, until: Callable[[list[dict[str, Any]]], bool], what: str) -> list[dict[str, Any]]:
        """Waits until the events of ``tag`` satisfy ``until`` (the app runs on after the response)."""
        return wait_for(
            lambda: until(events := self.events(tag)) and events,
            f"{what} under {self.name} (tag {tag}): {self.events(tag)}\n{self.server.describe()}",
        )

    def wait_finished(self, tag: str) -> list[dict[str, Any]]:
        """The events of a request whose app call has returned or raised."""
        return self.wait_events(tag, lambda events: any("return" in e or "raise" in e for e in events), "app done")

    def log_text(self) -> str:
        return self.server.stderr_text() + self.server.stdout_text()


class ReferenceServer(RushServer):
    """uvicorn or gunicorn, run and watched like a rush process (support.RushServer)."""

    def wait_ready(self, timeout: float = 30.0) -> None:
        # Over TLS the plain-HTTP readiness probe gets no answer: wait for the start-up line instead
        # (the listening socket exists already, so connections made after it queue until accepted).
        if any(option in self.command_line for option in ("--ssl-certfile", "--certfile")):
            self.wait_for_log(r"Application startup complete|Booting worker")
        else:
            super().wait_ready(timeout)

    def finish(self) -> None:
        # uvicorn re-raises SIGTERM once it has shut down gracefully, so its clean exit is -15:
        # stop it here (a stop by the test), and let the usual checks look at the rest.
        if self.proc is not None and not self.finished and not self.stopped_by_test and self.proc.poll() is None:
            self.stop()
        super().finish()


@dataclass
class Pair:
    """The same app under rush and under its reference server."""

    app: str
    rush: Side
    reference: Side

    def run(self, script: Callable[[Side], Any]) -> tuple[Any, Any]:
        """Runs the same client script against rush and the reference; returns both results."""
        return script(self.rush), script(self.reference)

    def compare(self, case: str, rush_view: Any, reference_view: Any) -> None:
        """Fails on every difference between the two views that deliberate.toml does not list."""
        ours, theirs = (flatten(mask_clock(mask_ports(view))) for view in (rush_view, reference_view))
        undeclared = []
        for path in sorted(set(ours) | set(theirs)):
            mine, other = ours.get(path, "<absent>"), theirs.get(path, "<absent>")
            if mine == other:
                continue
            where = f"{self.app}/{case}/{path}"
            entry = next((e for e in DELIBERATE if listed(e, where, mine, other)), None)
            if entry is not None:
                MATCHED.add(entry["match"])
            else:
                undeclared.append(
                    f"  {where}\n    rush:                 {mine!r}\n    {self.reference.name + ':':22}{other!r}"
                )
        assert not undeclared, "differences not listed in tests/differential/deliberate.toml:\n" + "\n".join(undeclared)

    def check(self, case: str, script: Callable[[Side], Any]) -> tuple[Any, Any]:
        """`run` then `compare`: the usual one-liner of a test."""
        rush_view, reference_view = self.run(script)
        self.compare(case, rush_view, reference_view)
        return rush_view, reference_view


def start_pair(
    factory: ServerFactory,
    app: str,
    interface: str,
    *,
    rush_args: Sequence[str] = (),
    reference_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    start: bool = True,
    reference: str | None = None,
    bind: str = "fd",
) -> Pair:
    """Starts ``tests/differential/apps/<app>`` (``module`` or ``module:attribute``) under rush and
    under uvicorn (``interface="asgi"``) or gunicorn (``"wsgi"``), or the ``reference`` named
    (``"hypercorn"``: ASGI over HTTP/2 too); with ``start=False``, does not wait for them to
    answer (for apps that are meant to fail at start-up). ``bind="uds"``: both listen on a Unix
    socket of their own (``--uds``; rush and uvicorn only); ``bind="none"``: only where the args
    say, and the caller waits until they answer."""
    assert bind != "uds" or (reference in (None, "uvicorn") and interface == "asgi"), "--uds: rush and uvicorn"
    on_fd = bind == "fd"
    module, _, attribute = app.partition(":")
    target = f"tests.differential.apps.{module}:{attribute or 'app'}"
    sides = []
    for name in ("rush", reference or ("uvicorn" if interface == "asgi" else "gunicorn")):
        record = factory.directory / f"{app.replace(':', '-')}-{name}.jsonl"
        record.unlink(missing_ok=True)
        entry = f"tests.differential.recorder:{interface}"
        if name == "rush":
            command = [str(RUSH), entry, "--workers", "1", "--interface", interface, *rush_args]
        elif name == "uvicorn":
            command = [str(VENV_BIN / "uvicorn"), entry, "--http", "httptools", "--loop", "uvloop"]
            command += [*(["--fd", "{fd}"] if on_fd else []), *reference_args]
        elif name == "hypercorn":
            # No worker processes (`--workers 0`): the process the test started serves, and stops.
            command = [str(VENV_BIN / "hypercorn"), entry, "--workers", "0"]
            command += [*(["--bind", "fd://{fd}"] if on_fd else []), *reference_args]
        else:
            command = [str(VENV_BIN / "gunicorn"), entry, "--workers", "1"]
            command += [*(["-b", "fd://{fd}"] if on_fd else []), *reference_args]
        server = (RushServer if name == "rush" else ReferenceServer)(
            app="",
            args=[],
            command=command,
            directory=factory.directory,
            name=f"{app.replace(':', '-')}-{name}",
            env=clean_environment({"DIFF_TARGET": target, "DIFF_RECORD": str(record), **(env or {})}),
            bind=bind,
        )
        factory.servers.append(server)
        server.start(wait=start and bind != "none")
        sides.append(Side(name, server, record))
    return Pair(app, sides[0], sides[1])


# ---------------------------------------------------------------------------
# Views: what to compare, as plain data


def mask_ports(value: Any) -> Any:
    """The servers listen on different free ports: ``127.0.0.1:NNNN`` anywhere (Host, Location,
    URLs in bodies) compares as ``127.0.0.1:PORT``."""
    if isinstance(value, str):
        return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", value)
    if isinstance(value, dict):
        return {key: mask_ports(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_ports(item) for item in value]
    return value


# A value signed with its time by itsdangerous (Flask's session cookie, Flask-Login's remember me):
# PAYLOAD.TIMESTAMP.SIGNATURE, base64url without padding; the payload starts with "." when
# compressed. The timestamp is the second it was signed in, and the signature covers it, so two
# servers answering in different seconds sign differently; the payload is what the app said.
SIGNED_WITH_TIME = re.compile(r"(?<![\w.-])(\.?[\w-]+)\.([\w-]{5,8})\.([\w-]{27,86})(?![\w.-])")
# A cookie's expiry computed from now (Django's csrftoken, Flask's permanent session).
COOKIE_EXPIRES = re.compile(r"(;\s*expires=)[^;]*", re.IGNORECASE)


def mask_clock(value: Any) -> Any:
    """Values the clock writes, anywhere in a view (Set-Cookie, Cookie, an environ, a body):
    a timed signature keeps its payload and loses its timestamp and signature
    (``PAYLOAD.<time>.<signature>``), a cookie's ``expires=`` loses its date. Dates that are facts
    rather than the time of answering (Last-Modified and the ETag of a file) are compared."""
    if isinstance(value, str):
        return COOKIE_EXPIRES.sub(r"\1<date>", SIGNED_WITH_TIME.sub(r"\1.<time>.<signature>", value))
    if isinstance(value, dict):
        return {key: mask_clock(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_clock(item) for item in value]
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [{"d": 2}], "e": [x, y]}`` -> ``{"a.b": 1, "c[0].d": 2, "e": [x, y]}``:
    dicts and lists of dicts become paths, other values (lists of plain values included, where
    order matters) are compared whole."""
    flat: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        flat[f"{prefix}.length"] = len(value)
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{prefix}[{index}]"))
        return flat
    return {prefix: value}


def framing_of(status: int, headers: Iterable[tuple[str, str]], method: str = "GET") -> str:
    """How the body's end is marked: ``chunked``, ``length``, ``close`` or ``none`` (no body)."""
    names = {name.lower(): value for name, value in headers}
    if status < 200 or status in (204, 304) or method == "HEAD":
        return "none"
    if "chunked" in names.get("transfer-encoding", "").lower():
        return "chunked"
    return "length" if "content-length" in names else "close"


def response_view(status: int, headers: Iterable[tuple[str, str]], body: bytes, method: str = "GET") -> dict:
    """What a client sees of one response, minus the server-owned fields."""
    headers = list(headers)
    grouped: dict[str, list[str]] = {}
    for name, value in headers:
        if name.lower() not in SERVER_OWNED:
            grouped.setdefault(name.lower(), []).append(value)
    return {
        "status": status,
        "headers": {name: values[0] if len(values) == 1 else values for name, values in sorted(grouped.items())},
        "framing": framing_of(status, headers, method),
        "body": body.decode("utf-8", "backslashreplace"),
    }


def httpx_view(response: Any) -> dict:
    return response_view(
        response.status_code, response.headers.multi_items(), response.content, response.request.method
    )


def raw_exchange(
    side: Side, method: str, target: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b""
) -> dict:
    """One request over a fresh raw socket, with Connection: close; the response as a view."""
    with side.connect() as connection:
        connection.send(request(method, target, [*headers, ("Connection", "close")], body))
        response = connection.read_response(method)
    return response_view(response.status, response.headers, response.body, method)


def merge_body_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Joins consecutive ``http.request`` messages into one: how a body is split between them is a
    matter of TCP segments and buffer sizes, not of the server's behaviour."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if message.get("type") == "http.request" and previous and previous.get("type") == "http.request":
            if previous.get("more_body"):
                previous["body"] = previous.get("body", "") + message.get("body", "")
                previous["more_body"] = message.get("more_body", False)
                continue
        merged.append(dict(message))
    for message in merged:
        if message.get("type") == "http.request":
            message.setdefault("more_body", False)
            message.setdefault("body", "")
    return merged


def received(events: list[dict[str, Any]]) -> list[Any]:
    """The sequence of what ``receive()`` gave the app (bodies merged), raises included."""
    messages = [
        e["receive"] if "receive" in e else {"raised": e["receive_raised"]}
        for e in events
        if "receive" in e or "receive_raised" in e
    ]
    return merge_body_messages(messages)


def asgi_app_view(events: list[dict[str, Any]], scope_keys: Sequence[str] | None = None) -> dict:
    """What an ASGI app saw of one request: its scope (all keys, or ``scope_keys``) and what
    ``receive()`` returned, and how its call ended."""
    scope = dict(next(e["scope"] for e in events if "scope" in e))
    # A WebSocket handshake's key is random per connection.
    scope["headers"] = [
        [name, "KEY" if name == "sec-websocket-key" else value] for name, value in scope.get("headers", [])
    ]
    if scope_keys is not None:
        scope = {key: scope.get(key, "<absent>") for key in scope_keys}
    ending = next(
        (("raise", e["raise"]) if "raise" in e else ("return", None) for e in events if "raise" in e or "return" in e),
        None,
    )
    sends_raised = [e["send_raised"] for e in events if "send_raised" in e]
    return {"scope": scope, "received": received(events), "ended": ending, "send_raised": sends_raised}


# Environ keys each server adds for itself (gunicorn's RAW_URI and gunicorn.*, rush.*), and values
# that name the server.
WSGI_SERVER_KEYS = re.compile(r"^(gunicorn\.|rush\.|RAW_URI$|SERVER_SOFTWARE$)")


def wsgi_app_view(events: list[dict[str, Any]]) -> dict:
    environ = next(e["environ"] for e in events if "environ" in e)
    environ = {key: value for key, value in environ.items() if not WSGI_SERVER_KEYS.match(key)}
    return {
        "environ": environ,
        "start_response": [e["start_response"] for e in events if "start_response" in e],
        "closed": any("close" in e for e in events),
        "raised": [e["raise"] for e in events if "raise" in e],
    }


# ---------------------------------------------------------------------------
# Raw-socket helpers for streams and disconnects


def read_until(connection: Connection, marker: bytes, timeout: float = 15.0) -> bytes:
    """Reads until ``marker`` is in the connection's buffer (a hung server fails at the guard
    timeout); returns the buffer so far."""
    deadline = time.monotonic() + timeout
    while marker not in connection.buffer:
        if connection.eof:
            raise AssertionError(f"connection closed before {marker!r}; got {connection.buffer!r}")
        try:
            connection._recv(deadline)
        except TimeoutError:
            raise AssertionError(f"{marker!r} did not arrive within {timeout}s; got {connection.buffer!r}") from None
    return connection.buffer


def head_and_rest(data: bytes) -> dict:
    """A raw response split into its head (as a view, minus server-owned fields) and the body's
    raw bytes as they crossed the wire (chunk framing included)."""
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
    view = response_view(int(lines[0].split()[1]), headers, b"")
    del view["body"]
    view["raw_body"] = rest.decode("latin-1")
    return view


def abort(connection: Connection) -> None:
    """Closes with a RST (SO_LINGER 0), as a client that crashes or loses its network does."""
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def error_lines(side: Side) -> list[str]:
    """Log lines at ERROR level (rush: ``[ERROR]``, uvicorn: ``ERROR:``, gunicorn: ``[ERROR]``)."""
    return [line for line in side.log_text().splitlines() if re.search(r"\[ERROR\]|^ERROR:", line)]


def read_all(connection: Connection, timeout: float = 15.0) -> bytes:
    """Every byte until the server closes the connection (guarded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not connection.eof:
        try:
            connection._recv(deadline)
        except TimeoutError:
            raise AssertionError(f"the server did not close within {timeout}s; got {connection.buffer!r}") from None
    return connection.buffer


def curl_view(side: Side, target: str, *args: str) -> dict:
    """A request made by curl (``args`` are curl's options); what it saw, as a view."""
    with tempfile.TemporaryDirectory() as directory:
        head_file, body_file = Path(directory, "head"), Path(directory, "body")
        command = ["curl", "-sS", "--max-time", "15", "-D", str(head_file), "-o", str(body_file), *args]
        subprocess.run([*command, side.url + target], check=True, capture_output=True)
        # With redirects followed or 100-continue, -D holds several heads: the last one is the answer.
        head = head_file.read_bytes().rstrip(b"\r\n").split(b"\r\n\r\n")[-1].decode("latin-1")
        # With -I, curl writes the head into the output file too: a HEAD response has no body.
        body = body_file.read_bytes() if body_file.exists() and "-I" not in args else b""
    lines = head.split("\r\n")
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
    return response_view(int(lines[0].split()[1]), headers, body, "HEAD" if "-I" in args else "GET")


def websocket_url(side: Side, path: str) -> str:
    return f"ws://127.0.0.1:{side.server.port}{path}"


def stop_and_get_lifespan(side: Side) -> dict:
    """Stops the server (SIGTERM) and returns the lifespan conversation the app had: its scope and
    every message both ways, startup and shutdown. For the last test of a module."""
    side.server.stop()
    events = side.events("lifespan")
    return {"scope": events[0]["scope"] if events else None, "conversation": events[1:]}
