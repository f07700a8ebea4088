"""A real nginx (Debian's package) terminating TLS and balancing over two
rush instances, which are restarted one after the other under load: not
one request may fail, and the app must see the original client and scheme.

How it works: the test writes an nginx configuration into a temporary
directory (a self-signed certificate made with the openssl command, a
loopback port, keep-alive upstream connections, ``proxy_next_upstream`` so
a request that meets a stopping or absent instance is retried on the
other, as production setups do) and runs nginx in the foreground as its
own child, stopped by PID. Client threads send GET requests through nginx
over keep-alive connections, each claiming to come from 203.0.113.7 behind
an outer proxy, until both restarts are over (bounded by a request count).
Each restart is SIGTERM, waiting for the PID to be gone, then a new rush
on the same port, waited for until it answers; or SIGHUP, rush's own
worker replacement. Nothing waits on the clock.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import GUARD_TIMEOUT, RushServer, ServerFactory, free_port, is_alive, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("nginx") is None or shutil.which("openssl") is None,
    reason="nginx and openssl are installed by `make test-tools`",
)

CLIENTS = 4
# Requests each instance answers before the next step (so every restart
# happens under load that reached both instances).
SHARE = 20
# Upper bound on the requests one client sends, should the restarts hang.
MAX_REQUESTS_PER_CLIENT = 20000

NGINX_CONFIG = """
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream rush {{
        # max_fails=0: an instance that is restarting is retried by the
        # next request rather than shunned for fail_timeout.
        server 127.0.0.1:{port_a} max_fails=0;
        server 127.0.0.1:{port_b} max_fails=0;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {dir}/cert.pem;
        ssl_certificate_key {dir}/key.pem;
        location / {{
            proxy_pass http://rush;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            # A refused connect, a reset keep-alive connection or a closing
            # instance: try the other one (GET is idempotent).
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries 4;
            proxy_connect_timeout 2s;
        }}
    }}
}}
"""


class Nginx:
    def __init__(self, directory: Path, upstream_ports: tuple[int, int]) -> None:
        self.directory = directory
        self.port = free_port()
        subprocess.run(
            [
                "openssl", "req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem"),
                "-days", "1", "-subj", "/CN=localhost",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        config = NGINX_CONFIG.format(dir=directory, port=self.port, port_a=upstream_ports[0], port_b=upstream_ports[1])
        (directory / "nginx.conf").write_text(config)
        self.stderr = open(directory / "nginx.stderr", "wb")
        self.proc = subprocess.Popen(
            ["nginx", "-p", str(directory), "-c", str(directory / "nginx.conf")], stderr=self.stderr
        )
        wait_for(self.accepting, f"nginx accepting on port {self.port}\n{self.log()}")

    def accepting(self) -> bool:
        assert self.proc.poll() is None, f"nginx exited\n{self.log()}"
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def log(self) -> str:
        error_log = self.directory / "error.log"
        return (error_log.read_text() if error_log.exists() else "") + (self.directory / "nginx.stderr").read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # nginx: fast shutdown, by the PID we started
            try:
                self.proc.wait(GUARD_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


@pytest.fixture
def nginx_factory(tmp_path: Path) -> Any:
    started: list[Nginx] = []

    def start(ports: tuple[int, int]) -> Nginx:
        started.append(Nginx(tmp_path, ports))
        return started[-1]

    yield start
    for nginx in started:
        nginx.stop()


@pytest.mark.parametrize("how", ["restart", "hup"])
def test_rolling_restart_behind_nginx_fails_no_request(
    rush_server: ServerFactory, nginx_factory: Any, how: str
) -> None:
    def start_rush(port: int) -> RushServer:
        return rush_server("fronted", "--forwarded-allow-ips", "127.0.0.1", bind="port", port=port)

    ports = (free_port(), free_port())
    instances = [start_rush(port) for port in ports]
    nginx = nginx_factory(ports)
    url = f"https://127.0.0.1:{nginx.port}/origin"
    restarts_done = threading.Event()
    failures: list[str] = []
    answered: Counter[int] = Counter()
    seen: set[tuple[Any, str]] = set()
    lock = threading.Lock()

    def client() -> None:
        headers = {"X-Forwarded-For": "203.0.113.7"}
        with httpx.Client(verify=False, timeout=GUARD_TIMEOUT) as session:
            for _ in range(MAX_REQUESTS_PER_CLIENT):
                if restarts_done.is_set():
                    return
                try:
                    response = session.get(url, headers=headers)
                    body = response.json() if response.status_code == 200 else None
                except (httpx.HTTPError, ValueError) as error:
                    with lock:
                        failures.append(repr(error))
                    continue
                with lock:
                    if body is None:
                        failures.append(f"{response.status_code}: {response.text[:200]}")
                    else:
                        answered[body["pid"]] += 1
                        seen.add((tuple(body["client"]), body["scheme"]))

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        # Load reaches both instances before anything is restarted.
        wait_for(
            lambda: (len(answered) == 2 and min(answered.values()) >= SHARE) or failures, "both instances answering"
        )
        for index, port in enumerate(ports):
            old = instances[index]
            if how == "restart":
                assert old.stop() == 0
                wait_for(lambda old=old: not any(is_alive(pid) for pid in old.seen_workers), "the old workers gone")
                instances[index] = start_rush(port)
                new_pid = instances[index].single_worker()
            else:
                # rush's own reload: a new worker, then the old one drains.
                (old_pid,) = old.worker_pids()
                old.send_signal(signal.SIGHUP)
                wait_for(lambda old_pid=old_pid: not is_alive(old_pid), "the old worker gone")
                new_pid = old.single_worker()
            # The new process takes its share before the next one stops.
            wait_for(lambda pid=new_pid: answered[pid] >= SHARE or failures, "the new instance answering through nginx")
    finally:
        restarts_done.set()
        for thread in threads:
            thread.join(GUARD_TIMEOUT)
    assert not failures, f"{len(failures)} failed of {sum(answered.values()) + len(failures)}: {failures[:5]}"
    assert len(answered) == 4, answered  # two instances, each replaced once
    # The app saw the client behind the outer proxy and nginx's TLS, not nginx.
    assert seen == {(("203.0.113.7", 0), "https")}
    assert "[alert]" not in nginx.log() and "[emerg]" not in nginx.log()
