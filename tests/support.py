"""Helpers for rush's integration tests: starting real rush processes and
talking raw HTTP/1.1 to them over real sockets.

* `RushServer` starts ``rush tests.apps.<module>:app`` as a child process on a
  listening socket the test binds itself (passed with ``--fd``, so no port
  race), waits until it answers a real request, records its stdout and stderr
  in files, and stops it by PID (TERM, then KILL) when the test is done,
  failing loudly if it crashed, panicked or lost a worker unexpectedly.
* `Connection` is a raw client socket: send bytes, read a number of responses
  or read until the server closes. Every read has a generous timeout, which
  is a failure guard (a hung server fails the test), never synchronisation.
* `parse_responses` splits a byte stream into HTTP responses, honouring
  Content-Length, chunked framing, HEAD, 1xx, 204 and 304.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The venv whose rush and Python the tests run: .venv, or (RUSH_VENV, set by `make test-pythons`)
# a venv of another CPython version with rush's wheel for that version installed.
VENV_BIN = Path(os.environ.get("RUSH_VENV") or REPO / ".venv") / "bin"
# The rush command under test: the development build, or (RUSH_BINARY, set by
# tests/test_wheel.py) the one a wheel installed into a fresh venv.
RUSH = Path(os.environ.get("RUSH_BINARY") or VENV_BIN / "rush")
PYTHON = VENV_BIN / "python"

# Upper bound for anything a test waits for. Reaching it means the server hung
# (or died): the test fails. Nothing is timed against it.
GUARD_TIMEOUT = 15.0
# How long a starting server may take to answer its first request.
START_TIMEOUT = 30.0


def wait_for(predicate: Callable[[], Any], message: str, timeout: float = GUARD_TIMEOUT, interval: float = 0.01) -> Any:
    """Polls ``predicate`` until it returns something truthy (and returns it);
    fails with ``message`` when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {message}")
        time.sleep(interval)


# ---------------------------------------------------------------------------
# Response parsing


@dataclass
class HTTPResponse:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw_head: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        values = self.header_list(name)
        return values[0] if values else None

    def header_list(self, name: str) -> list[str]:
        lowered = name.lower()
        return [value for key, value in self.headers if key.lower() == lowered]

    @property
    def closes(self) -> bool:
        """The response announces that the server closes the connection."""
        value = self.header("connection") or ""
        return "close" in [token.strip().lower() for token in value.split(",")]

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()

    def __repr__(self) -> str:
        return f"<HTTPResponse {self.status} {self.headers!r} body={self.body[:80]!r}>"


class IncompleteResponse(Exception):
    """The bytes end in the middle of a response."""


_STATUS_LINE = re.compile(rb"(HTTP/\d\.\d) (\d{3})(?: (.*))?")


def _parse_chunked(data: bytes, start: int) -> tuple[bytes, int]:
    body = bytearray()
    position = start
    while True:
        line_end = data.find(b"\r\n", position)
        if line_end < 0:
            raise IncompleteResponse
        size = int(data[position:line_end].split(b";")[0].strip(), 16)
        position = line_end + 2
        if size == 0:
            # Trailers end with an empty line.
            while True:
                line_end = data.find(b"\r\n", position)
                if line_end < 0:
                    raise IncompleteResponse
                empty = line_end == position
                position = line_end + 2
                if empty:
                    return bytes(body), position
        if len(data) < position + size + 2:
            raise IncompleteResponse
        body += data[position : position + size]
        if data[position + size : position + size + 2] != b"\r\n":
            raise ValueError(f"bad chunk terminator at {position + size}: {data[position + size :]!r}")
        position += size + 2


def parse_one(data: bytes, start: int, method: str, at_eof: bool) -> tuple[HTTPResponse, int]:
    """Parses the response starting at ``data[start:]``. Raises
    IncompleteResponse if more bytes are needed; ValueError on garbage."""
    head_end = data.find(b"\r\n\r\n", start)
    if head_end < 0:
        if len(data) - start > 65536:
            raise ValueError(f"no end of response head in {data[start : start + 200]!r}...")
        raise IncompleteResponse
    raw_head = data[start : head_end + 4]
    lines = data[start:head_end].split(b"\r\n")
    match = _STATUS_LINE.fullmatch(lines[0])
    if match is None:
        raise ValueError(f"not a status line: {lines[0]!r} (stream: {data[start : start + 200]!r})")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or name != name.strip() or not name:
            raise ValueError(f"malformed response header line {line!r}")
        headers.append((name.decode("latin-1"), value.strip().decode("latin-1")))
    response = HTTPResponse(
        version=match.group(1).decode(),
        status=int(match.group(2)),
        reason=(match.group(3) or b"").decode("latin-1"),
        headers=headers,
        body=b"",
        raw_head=raw_head,
    )
    body_start = head_end + 4
    lengths = response.header_list("content-length")
    if len(set(lengths)) > 1:
        raise ValueError(f"conflicting Content-Length in response: {lengths}")
    if response.status < 200 or response.status in (204, 304) or method.upper() == "HEAD":
        return response, body_start
    encoding = (response.header("transfer-encoding") or "").lower()
    if encoding:
        if lengths:
            raise ValueError("response with both Content-Length and Transfer-Encoding")
        if encoding != "chunked":
            raise ValueError(f"unexpected response transfer coding {encoding!r}")
        response.body, end = _parse_chunked(data, body_start)
        return response, end
    if lengths:
        length = int(lengths[0])
        if len(data) < body_start + length:
            raise IncompleteResponse
        response.body = data[body_start : body_start + length]
        return response, body_start + length
    # No framing: the body runs to the end of the connection.
    if not at_eof:
        raise IncompleteResponse
    response.body = data[body_start:]
    return response, len(data)


def parse_responses(data: bytes, methods: Sequence[str] = (), at_eof: bool = True) -> tuple[list[HTTPResponse], bytes]:
    """Splits ``data`` into responses. ``methods`` gives the request method for
    each final (non-1xx) response in order (default GET), so HEAD responses
    are read without a body. Returns the responses and the unparsed rest."""
    responses: list[HTTPResponse] = []
    position = 0
    finals = 0
    while position < len(data):
        method = methods[finals] if finals < len(methods) else "GET"
        try:
            response, position = parse_one(data, position, method, at_eof)
        except IncompleteResponse:
            break
        responses.append(response)
        if response.status >= 200:
            finals += 1
    return responses, data[position:]


# ---------------------------------------------------------------------------
# Raw client connections


@dataclass
class CloseResult:
    """What arrived on a connection until the server closed it."""

    responses: list[HTTPResponse]
    reset: bool  # closed with a RST rather than a FIN
    leftover: bytes = b""


class Connection:
    """A raw client socket with a receive buffer and response parsing."""

    def __init__(
        self, address: Any, family: int = socket.AF_INET, timeout: float = GUARD_TIMEOUT, rcvbuf: int | None = None
    ) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if rcvbuf is not None:
            # Before connecting, so the window the server sees is small from the start.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if family == socket.AF_INET:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.connect(address)
        self.timeout = timeout
        self.buffer = b""
        self.finals_read = 0
        self.eof = False
        self.reset = False

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self, deadline: float) -> bool:
        """Reads once; False on EOF or reset. Raises TimeoutError at the deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            self.eof = self.reset = True
            return False
        except TimeoutError:
            raise
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    def read_responses(self, count: int, methods: Sequence[str] = ()) -> list[HTTPResponse]:
        """Reads exactly ``count`` responses (1xx included). ``methods`` names
        the request method of each final response to come (default GET)."""
        deadline = time.monotonic() + self.timeout
        responses: list[HTTPResponse] = []
        methods = list(methods)
        while len(responses) < count:
            parsed = self._parse_available(methods, count - len(responses), at_eof=self.eof)
            for response in parsed:
                responses.append(response)
                if response.status >= 200 and methods:
                    methods.pop(0)
            if len(responses) >= count:
                break
            if self.eof:
                raise AssertionError(
                    f"connection closed after {len(responses)} of {count} responses "
                    f"(reset={self.reset}); got {responses!r}, unparsed {self.buffer[:300]!r}"
                )
            try:
                self._recv(deadline)
            except TimeoutError:
                raise AssertionError(
                    f"no complete response within {self.timeout}s: got {responses!r}, unparsed {self.buffer[:300]!r}"
                ) from None
        return responses

    def read_response(self, method: str = "GET") -> HTTPResponse:
        return self.read_responses(1, [method])[0]

    def _parse_available(self, methods: Sequence[str], limit: int, at_eof: bool) -> list[HTTPResponse]:
        responses: list[HTTPResponse] = []
        position = 0
        finals = 0
        while len(responses) < limit and position < len(self.buffer):
            method = methods[finals] if finals < len(methods) else "GET"
            try:
                response, position = parse_one(self.buffer, position, method, at_eof)
            except IncompleteResponse:
                break
            responses.append(response)
            if response.status >= 200:
                finals += 1
        self.buffer = self.buffer[position:]
        return responses

    def read_until_close(self, methods: Sequence[str] = ()) -> CloseResult:
        """Reads until the server closes the connection; fails if it does not
        within the guard timeout. Returns every response that arrived."""
        deadline = time.monotonic() + self.timeout
        while not self.eof:
            try:
                self._recv(deadline)
            except TimeoutError:
                raise AssertionError(
                    f"server did not close the connection within {self.timeout}s; received {self.buffer[:300]!r}"
                ) from None
        responses, rest = parse_responses(self.buffer, methods, at_eof=True)
        self.buffer = b""
        return CloseResult(responses, self.reset, rest)

    def assert_closed(self) -> CloseResult:
        """Reads until close and checks nothing more arrived."""
        result = self.read_until_close()
        assert result.responses == [] and result.leftover == b"", f"unexpected bytes before close: {result!r}"
        return result

    def nothing_arrives(self, window: float) -> bool:
        """True if no byte arrives (and the connection stays open) for ``window`` seconds."""
        if self.buffer:
            return False
        readable, _, _ = select.select([self.sock], [], [], window)
        return not readable


def request(
    method: str = "GET",
    target: str = "/",
    headers: Iterable[tuple[str, str]] | None = None,
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: str | None = "test",
    content_length: bool | None = None,
) -> bytes:
    """Builds raw request bytes. Adds Host (unless ``host`` is None) and a
    Content-Length for a non-empty body (unless ``content_length`` is False)."""
    lines = [f"{method} {target} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    for name, value in headers or ():
        lines.append(f"{name}: {value}")
    if content_length or (content_length is None and body):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(*pieces: bytes, trailers: bytes = b"") -> bytes:
    """Encodes ``pieces`` as a chunked body (one chunk each) with a last chunk and trailers."""
    out = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces if piece)
    return out + b"0\r\n" + trailers + b"\r\n"


# ---------------------------------------------------------------------------
# Processes


def children_of(pid: int) -> set[int]:
    """PIDs of the live child processes of ``pid``."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found.update(int(child) for child in children.read().split())
        except FileNotFoundError:
            continue
    return {child for child in found if is_alive(child)}


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def zombie_children(pid: int) -> set[int]:
    """PIDs of the children of ``pid`` that exited and are not reaped yet."""
    found: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/children") as children:
                found.update(int(child) for child in children.read().split())
    zombies = set()
    for child in found:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError), open(f"/proc/{child}/stat") as stat:
            if stat.read().rpartition(")")[2].split()[0] == "Z":
                zombies.add(child)
    return zombies


def fd_targets(pid: int) -> dict[int, str]:
    """The open file descriptors of process ``pid`` and what each points to
    (``socket:[inode]``, ``pipe:[inode]``, a path...)."""
    targets = {}
    for entry in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            targets[int(entry)] = os.readlink(f"/proc/{pid}/fd/{entry}")
    return targets


def socket_fd_count(pid: int) -> int:
    """Number of open socket file descriptors of process ``pid``."""
    count = 0
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if os.readlink(f"/proc/{pid}/fd/{entry}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def clean_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without RUSH_* variables (nor
    WEB_CONCURRENCY, which rush reads as --workers), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RUSH_") and key != "WEB_CONCURRENCY"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def run_to_exit(
    command: Sequence[str], cwd: Path = REPO, env: dict[str, str] | None = None, pass_fds: Sequence[int] = ()
) -> subprocess.CompletedProcess[str]:
    """Runs a command that is expected to exit by itself: a clean
    environment plus ``env``, stdin closed, text output captured, and the
    guard timeout so a hang fails the test instead of stalling it."""
    return subprocess.run(
        list(command),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=GUARD_TIMEOUT,
        env=clean_environment(env),
        pass_fds=tuple(pass_fds),
        stdin=subprocess.DEVNULL,
    )


def run_rush(*args: object, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the rush command to completion (a start refused, --help,
    --print-config: anything that exits on its own)."""
    return run_to_exit([str(RUSH), *map(str, args)], cwd=cwd, env=env)


def headless_chromium(profile: Path, *args: str) -> list[str]:
    """The command line of a headless Chromium with its own profile that
    takes the tests' self-made certificates, followed by ``args``. Skips the
    calling test where Chromium is not installed (`make test-browser` installs it)."""
    browser = shutil.which("chromium")
    if browser is None:
        import pytest

        pytest.skip("chromium is missing (Debian's chromium, about 300 MB): `make test-browser` installs it")
    return [
        browser,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--ignore-certificate-errors",
        f"--user-data-dir={profile}",
        *args,
    ]


def free_port() -> int:
    """A port that was free a moment ago (only for tests of --port itself;
    everything else passes a bound socket with --fd)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Markers of a server in trouble: a Rust panic, or a caught one.
PANIC_MARKERS = ("panicked at", "internal error while serving")


@dataclass
class RushServer:
    """One rush process (supervisor plus workers) started for a test."""

    app: str
    args: Sequence[str]
    directory: Path
    env: dict[str, str] | None = None
    # How it listens: "fd" (a socket bound here, passed with --fd, or in place of
    # "{fd}" in the command), "uds", "port" (--port with a free port),
    # "env-port" (the same through RUSH_PORT) or "none" (the args say it all).
    bind: str = "fd"
    command: Sequence[str] | None = None  # replaces `rush APP` (e.g. python -m rush)
    allow_worker_deaths: bool = False
    proc: subprocess.Popen[bytes] | None = None
    port: int | None = None
    uds_path: Path | None = None
    stopped_by_test: bool = False
    name: str = "rush"
    seen_workers: set[int] = field(default_factory=set)
    finished: bool = False
    _files: list[Any] = field(default_factory=list)

    # -- starting -----------------------------------------------------------

    def start(self, wait: bool = True) -> RushServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.stdout_path = self.directory / f"{self.name}.stdout"
        self.stderr_path = self.directory / f"{self.name}.stderr"
        command = list(self.command or [str(RUSH)])
        if self.app:
            command.append(f"tests.apps.{self.app}:app" if ":" not in self.app else self.app)
        command += [str(arg) for arg in self.args]
        # The fd placeholder may sit anywhere in the command (e.g. a script's argument).
        has_placeholder = any("{fd}" in part for part in command)
        pass_fds: tuple[int, ...] = ()
        listener = None
        if self.bind == "fd":
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            fd_text = str(listener.fileno())
            if has_placeholder:
                command = [part.replace("{fd}", fd_text) for part in command]
            else:
                command += ["--fd", fd_text]
            pass_fds = (listener.fileno(),)
        elif self.bind == "uds":
            self.uds_path = self.uds_path or (self.directory / f"{self.name}.sock")
            command += ["--uds", str(self.uds_path)]
        elif self.bind == "port":
            self.port = self.port or free_port()
            command += ["--port", str(self.port)]
        elif self.bind == "env-port":
            self.port = self.port or free_port()
            self.env = {**(self.env or clean_environment()), "RUSH_PORT": str(self.port)}
        stdout = open(self.stdout_path, "wb")
        stderr = open(self.stderr_path, "wb")
        self._files += [stdout, stderr]
        self.command_line = command
        try:
            self.proc = subprocess.Popen(
                command,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=clean_environment() if self.env is None else self.env,
                pass_fds=pass_fds,
                start_new_session=True,
            )
        finally:
            if listener is not None:
                # The child holds its own copy; the kernel queues connections until a worker accepts.
                listener.close()
        if wait:
            self.wait_ready()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> Any:
        if self.uds_path is not None and self.bind == "uds":
            return str(self.uds_path)
        return ("127.0.0.1", self.port)

    @property
    def family(self) -> int:
        return socket.AF_UNIX if self.bind == "uds" else socket.AF_INET

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout: float = GUARD_TIMEOUT, rcvbuf: int | None = None) -> Connection:
        return Connection(self.address, self.family, timeout, rcvbuf)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Polls with real requests until one is answered; fails early if the process exits."""
        deadline = time.monotonic() + timeout
        probe = request("GET", "/__readiness_probe__", [("Connection", "close")])
        while True:
            self.assert_running("while starting")
            try:
                with Connection(self.address, self.family, timeout=0.5) as connection:
                    connection.send(probe)
                    # Poll in short steps so a crash during start-up is noticed.
                    while True:
                        self.assert_running("while starting")
                        readable, _, _ = select.select([connection.sock], [], [], 0.1)
                        if readable:
                            result = connection.read_until_close()
                            if result.responses:
                                return
                            break
                        if time.monotonic() > deadline:
                            break
            except (OSError, AssertionError) as error:
                if isinstance(error, AssertionError) and "while starting" in str(error):
                    raise
            if time.monotonic() > deadline:
                raise AssertionError(f"rush did not answer within {timeout}s\n{self.describe()}")
            time.sleep(0.02)

    # -- observing ----------------------------------------------------------

    def assert_running(self, context: str = "") -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"rush exited with {self.proc.returncode} {context}\n{self.describe()}")

    def stderr_text(self) -> str:
        return self.stderr_path.read_bytes().decode(errors="replace")

    def stdout_text(self) -> str:
        return self.stdout_path.read_bytes().decode(errors="replace")

    def describe(self) -> str:
        return (
            f"command: {' '.join(self.command_line)}\n"
            f"--- stderr ---\n{self.stderr_text()[-6000:]}\n--- stdout ---\n{self.stdout_text()[-2000:]}"
        )

    def wait_for_log(self, pattern: str, count: int = 1, stream: str = "stderr") -> list[re.Match[str]]:
        """Waits until ``pattern`` (a regex) occurs ``count`` times in the log."""

        def matches() -> list[re.Match[str]] | None:
            text = self.stderr_text() if stream == "stderr" else self.stdout_text()
            found = list(re.finditer(pattern, text))
            return found if len(found) >= count else None

        return wait_for(matches, f"{pattern!r} x{count} in rush's {stream}\n{self.describe()}")

    def worker_pids(self) -> set[int]:
        pids = children_of(self.pid)
        self.seen_workers |= pids
        return pids

    def wait_for_workers(self, count: int) -> set[int]:
        return wait_for(
            lambda: (pids := self.worker_pids()) and len(pids) == count and pids,
            f"{count} worker processes\n{self.describe()}",
        )

    def single_worker(self) -> int:
        (pid,) = self.wait_for_workers(1)
        return pid

    # -- stopping -----------------------------------------------------------

    def send_signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = GUARD_TIMEOUT) -> int:
        """Waits for the supervisor to exit (the test made it stop); returns its exit code."""
        assert self.proc is not None
        self.stopped_by_test = True
        self.worker_pids()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_everything()
            raise AssertionError(f"rush did not exit within {timeout}s\n{self.describe()}") from None

    def stop(self, signum: int = signal.SIGTERM, timeout: float = GUARD_TIMEOUT) -> int:
        """Signals the supervisor and waits for it to exit; returns its exit code."""
        self.worker_pids()
        if self.proc is not None and self.proc.poll() is None:
            self.send_signal(signum)
        return self.wait_exit(timeout)

    def kill_everything(self) -> None:
        """SIGKILL for the supervisor and its workers (its own session)."""
        assert self.proc is not None
        workers = self.worker_pids()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def problems(self) -> list[str]:
        """Signs in the logs that something went wrong that no test asked for."""
        text = self.stderr_text()
        found = [marker for marker in PANIC_MARKERS if marker in text]
        if not self.allow_worker_deaths and re.search(r"worker \d+ died", text):
            found.append("a worker died")
        return found

    def finish(self) -> None:
        """Teardown: stop the server if the test did not, and fail loudly on trouble."""
        if self.proc is None or self.finished:
            return
        self.finished = True
        try:
            failures = []
            self.worker_pids()
            if not self.stopped_by_test:
                code = self.proc.poll()
                if code is not None:
                    failures.append(f"rush crashed during the test (exit code {code})")
                else:
                    self.proc.send_signal(signal.SIGTERM)
                    try:
                        code = self.proc.wait(GUARD_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        self.kill_everything()
                        failures.append(f"rush did not stop within {GUARD_TIMEOUT}s of SIGTERM")
                    else:
                        if code != 0:
                            failures.append(f"rush exited with {code} after SIGTERM")
            elif self.proc.poll() is None:
                self.kill_everything()
            leftover = {pid for pid in self.seen_workers if is_alive(pid)}
            if leftover:
                failures.append(f"workers still alive after the supervisor exited: {leftover}")
            failures += self.problems()
            if failures:
                raise AssertionError("; ".join(failures) + "\n" + self.describe())
        finally:
            for handle in self._files:
                handle.close()


class ServerFactory:
    """Starts `RushServer`s in a directory and finishes them all at teardown."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers: list[RushServer] = []

    def __call__(self, app: str = "basic", *args: Any, wait: bool = True, **options: Any) -> RushServer:
        name = f"rush{len(self.servers)}"
        server = RushServer(app=app, args=list(args), directory=self.directory, name=name, **options)
        self.servers.append(server)
        return server.start(wait=wait)

    def finish_all(self) -> None:
        errors = []
        for server in self.servers:
            try:
                server.finish()
            except AssertionError as error:
                errors.append(str(error))
        if errors:
            raise AssertionError("\n\n".join(errors))


class Gate:
    """A request the test apps' ``/gate`` handlers hold until the test releases
    it: the handler creates ``<name>.entered`` on entry and returns once
    ``<name>.release`` exists."""

    def __init__(self, directory: Path, name: str = "gate") -> None:
        self.directory = directory
        self.name = name
        self.entered = directory / f"{name}.entered"
        self.released = directory / f"{name}.release"

    @property
    def target(self) -> str:
        return f"/gate?dir={self.directory}&name={self.name}"

    def wait_entered(self) -> int:
        """Waits until the handler runs; returns the PID of the worker running it."""
        wait_for(self.entered.exists, f"a handler entering gate {self.name}")
        return int(wait_for(self.entered.read_text, "the gate's marker file to be written"))

    def release(self) -> None:
        self.released.touch()


def write_localhost_pki(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a certificate for localhost and 127.0.0.1 (trustme),
    written to ``directory`` as ``ca.pem``, ``chain.pem`` and ``key.pem``."""
    import trustme  # only the TLS tests need it

    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "chain", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    leaf.private_key_pem.write_to_path(paths["key"])
    paths["chain"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    return paths
