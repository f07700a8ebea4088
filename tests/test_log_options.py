"""``--access-log-format``, ``--log-format json``, ``--log-config``, refused
requests at warning level (rate-limited) and ``--log-level debug``
connection events, each over a real socket and read back from the log."""

from __future__ import annotations

import importlib.util
import json
import re
import socket
from pathlib import Path

import pytest

from tests.support import PYTHON, RushServer, ServerFactory, clean_environment, request, wait_for

FORMAT = '%(h)s|%(l)s|"%(r)s"|%(s)s|%(b)s|%(D)s|%(L)s|%(T)s|"%(f)s"|"%(a)s"|%(m)s %(U)s %(q)s %(H)s|%(t)s|%({x-id}i)s'
FORMAT_LINE = (
    r'(?m)^1\.2\.3\.4\|-\|"GET /origin\?a=1 HTTP/1\.1"\|200\|\d+\|\d+\|\d+\.\d{6}\|0\|"https://ref\.test/"\|"probe/1\.0"'
    r"\|GET /origin a=1 HTTP/1\.1\|\[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\]\|abc"
)
HEADERS = [
    ("Referer", "https://ref.test/"),
    ("User-Agent", "probe/1.0"),
    ("X-Id", "abc"),
    ("X-Forwarded-For", "1.2.3.4"),
]


def get(server: RushServer, target: str = "/origin", headers: list[tuple[str, str]] | None = None) -> int:
    with server.connect() as connection:
        connection.send(request("GET", target, headers))
        return connection.read_response().status


@pytest.mark.parametrize("how", ["flag", "env"])
def test_access_log_format_atoms(rush_server: ServerFactory, how: str) -> None:
    if how == "flag":
        server = rush_server("fronted", "--access-log", "--access-log-format", FORMAT)
    else:
        variables = {"RUSH_ACCESS_LOG": "1", "RUSH_ACCESS_LOG_FORMAT": FORMAT}
        server = rush_server("fronted", env=clean_environment(variables))
    assert get(server, "/origin?a=1", HEADERS) == 200
    server.wait_for_log(FORMAT_LINE, stream="stdout")
    # A header the request lacks is a dash; the peer's address comes without its port.
    get(server, "/origin?a=1")
    server.wait_for_log(r'(?m)^127\.0\.0\.1\|-\|.*\|"-"\|"-"\|GET /origin a=1 HTTP/1\.1\|.*\|-$', stream="stdout")


def test_an_unknown_atom_is_a_start_up_error(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--access-log-format", "%(h)s %(zz)s", wait=False)
    assert server.wait_exit() == 2
    assert "unknown access log atom %(zz)s" in server.stderr_text()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_json_log_format(rush_server: ServerFactory, how: str) -> None:
    if how == "flag":
        server = rush_server("fronted", "--access-log", "--log-format", "json")
    else:
        server = rush_server("fronted", env=clean_environment({"RUSH_ACCESS_LOG": "1", "RUSH_LOG_FORMAT": "json"}))
    assert get(server, "/origin", [("X-Forwarded-For", "1.2.3.4")]) == 200
    server.wait_for_log(r'"request_line": "GET /origin HTTP/1\.1"', stream="stdout")
    access = [json.loads(line) for line in server.stdout_text().splitlines() if "/origin" in line]
    assert access[0]["remote_addr"] == "1.2.3.4"
    assert (access[0]["status"], access[0]["logger"], access[0]["level"]) == (200, "rush.access", "INFO")
    assert isinstance(access[0]["size"], int) and isinstance(access[0]["duration_us"], int)
    get(server, "/origin?direct=1")
    server.wait_for_log(r'"request_line": "GET /origin\?direct=1 HTTP/1\.1"', stream="stdout")
    direct = [json.loads(line) for line in server.stdout_text().splitlines() if "direct=1" in line]
    assert direct[0]["remote_addr"] == "127.0.0.1"
    # Every error-log line is a JSON object too.
    server.wait_for_log(r'"message": "worker \d+ serving')
    for line in server.stderr_text().splitlines():
        assert json.loads(line)["logger"] == "rush.error"


LOG_CONFIG = {
    "version": 1,
    "formatters": {"bare": {"format": "ACCESS %(message)s"}},
    "handlers": {"file": {"class": "logging.FileHandler", "filename": "PLACEHOLDER", "formatter": "bare"}},
    "loggers": {"rush.access": {"handlers": ["file"], "level": "INFO", "propagate": False}},
}


@pytest.mark.parametrize("kind", ["json", "yaml", "env"])
def test_log_config(rush_server: ServerFactory, tmp_path: Path, kind: str) -> None:
    if kind == "yaml" and importlib.util.find_spec("yaml") is None:
        pytest.skip("PyYAML is not installed")
    log_file = tmp_path / "access.log"
    config = json.loads(json.dumps(LOG_CONFIG).replace("PLACEHOLDER", str(log_file)))
    path = tmp_path / ("logging.yaml" if kind == "yaml" else "logging.json")
    # JSON is a subset of YAML: the same text serves both.
    path.write_text(json.dumps(config))
    if kind == "env":
        server = rush_server("fronted", env=clean_environment({"RUSH_ACCESS_LOG": "1", "RUSH_LOG_CONFIG": str(path)}))
    else:
        server = rush_server("fronted", "--access-log", "--log-config", str(path))
    assert get(server, "/origin?configured=1") == 200
    wait_for(lambda: log_file.exists() and "configured=1" in log_file.read_text(), "the access line in the file")
    assert re.search(
        r'^ACCESS 127\.0\.0\.1:\d+ - "GET /origin\?configured=1 HTTP/1\.1" 200', log_file.read_text(), re.M
    )
    assert "configured=1" not in server.stdout_text()


def test_missing_log_config_is_a_start_up_error(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server("fronted", "--log-config", str(tmp_path / "absent.json"), wait=False)
    assert server.wait_exit() == 2
    assert "--log-config must name a JSON or YAML file" in server.stderr_text()


def send_raw(server: RushServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", r"400 "),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", r"414 request line too long"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 17000 + b"\r\n\r\n", r"431 "),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", r"505 "),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", r"413 request body too large"),
    ],
)
def test_refused_requests_are_warnings_with_the_reason(rush_server: ServerFactory, data: bytes, reason: str) -> None:
    server = rush_server("fronted", "--log-level", "warning")
    assert send_raw(server, data).startswith(b"HTTP/1.1 4") or reason.startswith("505")
    server.wait_for_log(r"\[WARNING\] refused a request from 127\.0\.0\.1:\d+: " + reason)


def test_a_request_that_times_out_is_a_warning(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--header-timeout", "0.3")
    assert send_raw(server, b"GET / HTTP/1.1\r\nHost: x\r\n").startswith(b"HTTP/1.1 408")
    server.wait_for_log(r"\[WARNING\] refused a request from 127\.0\.0\.1:\d+: 408 ")


def test_refusal_warnings_are_rate_limited(rush_server: ServerFactory) -> None:
    server = rush_server("fronted")
    bad = b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"
    lines = re.compile(r"refused a request from ", re.M)
    counts = re.compile(r"(\d+) more refused since the last line, not logged")
    sent = 50
    for _ in range(sent):
        send_raw(server, bad)

    def accounted() -> tuple[int, int] | None:
        text = server.stderr_text()
        logged, reported = len(lines.findall(text)), sum(int(count) for count in counts.findall(text))
        return (logged, reported) if logged + reported >= sent else None

    # Every refusal is logged or counted, and the counts are reported (by
    # the worker's once-a-second sweep when no later line comes).
    logged, reported = wait_for(accounted, "every refused request logged or counted")
    assert logged + reported == sent
    assert logged < sent and reported > 0


def test_debug_logs_connections_and_timeouts(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--log-level", "debug", "--keep-alive-timeout", "0.3")
    with server.connect() as connection:
        connection.send(request("GET", "/origin"))
        connection.read_response()
        port = connection.sock.getsockname()[1]
        # The server closes the idle connection: read until it does.
        while connection.sock.recv(1):
            pass
    server.wait_for_log(rf"\[DEBUG\] connection from 127\.0\.0\.1:{port} opened")
    server.wait_for_log(rf"\[DEBUG\] connection from 127\.0\.0\.1:{port} timed out \(--keep-alive-timeout\)")
    server.wait_for_log(rf"\[DEBUG\] connection from 127\.0\.0\.1:{port} closed")
    quiet = rush_server("fronted")
    get(quiet)
    assert "[DEBUG]" not in quiet.stderr_text()


def test_a_refusal_after_a_forwarded_request_names_the_peer(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--log-level", "warning")
    forwarded = request("GET", "/origin", [("X-Forwarded-For", "1.2.3.4")])
    received = send_raw(server, forwarded + b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n")
    assert b"HTTP/1.1 400" in received
    server.wait_for_log(r"refused a request from 127\.0\.0\.1:\d+: 400 ")
    assert "1.2.3.4" not in server.stderr_text()


# gunicorn's own default access format, without its time atom (the two
# servers answer in different seconds).
GUNICORN_FORMAT = '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(m)s %(U)s %(q)s %(H)s %({x-id}i)s'


def test_access_log_format_gives_gunicorns_line(rush_server: ServerFactory) -> None:
    """The same format, app and request give the same line as gunicorn's
    access log, with nothing around it (no logger prefix)."""
    rush = rush_server("wsgi_apps", "--access-log", "--access-log-format", GUNICORN_FORMAT)
    gunicorn_command = [str(PYTHON), "-m", "gunicorn", "--bind", "fd://{fd}", "--access-logfile", "-"]
    gunicorn = rush_server("wsgi_apps", "--access-logformat", GUNICORN_FORMAT, command=gunicorn_command)
    headers = [("User-Agent", "probe/1.0"), ("Referer", "https://ref.test/"), ("X-Id", "abc")]
    lines = []
    for server in (rush, gunicorn):
        assert get(server, "/big?size=100", headers) == 200
        (match,) = server.wait_for_log(r"(?m)^.*GET /big\?size=100 HTTP/1\.1.*$", stream="stdout")
        lines.append(match.group())
    assert lines[0] == lines[1]
    expected = '127.0.0.1 - - "GET /big?size=100 HTTP/1.1" 200 100 "https://ref.test/" "probe/1.0" '
    assert lines[0] == expected + "GET /big size=100 HTTP/1.1 abc"
