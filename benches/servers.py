"""Who the suite measures: each server as command lines, in its fastest one-worker configuration.

A `Server` says where it comes from: ``venv="rush"`` (rush's own ``.venv``),
``"bench"`` (the separate ``.venv-bench``, so peers never leak into rush's
environment) or ``"system"`` (a program from the system packages, like nginx,
or built by the suite, like the Rust peers). It lists what `benches.tools`
installs for it (pip requirements, Debian packages), a probe telling whether
it is usable, and one command template per **app** it can serve.

An app is a set of endpoints a scenario needs (`Scenario.app`); a server is
measured on a scenario only if it has a command for that app:

- ``hello``: the hello endpoints (``/``, ``/hello?name=``, ``/json``, the
  ``/easter`` redirect, a 404), from each interface's module in benches/apps/;
- ``root``: only ``GET /`` -> ``Hello, World!`` (the teaching servers in
  examples/concurrency/ and the Rust peers serve nothing else);
- ``rush-v2``: a static site at ``/`` (``index.html``), ``/easter`` and ``/hello``;
- ``static``: the site's files under ``/static/``;
- ``wsgi``, ``asgi``: the hello endpoints through that interface;
- ``flask``, ``fastapi``: the framework apps of benches/apps/;
- ``starlette-file``: Starlette's ``FileResponse`` of the site's files (ASGI pathsend);
- ``proxy``: a forward proxy (rush proxy, squid, tinyproxy, proxy.py), measured with an
  origin in front of which it stands (`benches.proxies`, ``Scenario.origin_app``);
- ``ws``: WebSocket ``/echo`` and ``/broadcast`` (and ``GET /``), from each interface's
  benches/apps/ws_*.py module: the websocket group, one row per server and interface;
- ``h2-hello``, ``h2-asgi``, ``h2-wsgi``, ``h2-static``: the http2 group's hello and static
  endpoints over h2c with prior knowledge, each server in its HTTP/2 set-up (rush ``--http
  auto``, granian ``--http 2``, hypercorn, nginx ``listen ... http2``).
- ``h3-hello``, ``h3-asgi``, ``h3-static``: the http3 group's endpoints over HTTP/3 (QUIC on UDP)
  and HTTPS on TCP on the same port number (rush ``--http3``, hypercorn ``--quic-bind``), with
  benches/tls.py's certificate; ``tls-asgi`` (with the tls group's ``tls-hello`` and
  ``tls-static``): rush's usual HTTPS, ALPN ``h2`` then ``http/1.1``, for the group's HTTP/2
  and HTTP/1.1 rows.

Templates use ``{bin}`` (the venv's bin directory), ``{host}``, ``{port}``,
``{workers}`` (only servers whose template has it take part in multi-worker
scenarios), ``{workdir}`` (a fresh directory per run, for generated config),
``{site}`` (the static files), ``{rust_bin}`` (the Rust peers' build) and
``{python}`` (the runner's interpreter, for version look-ups) and ``{origin_port}`` (the
origin behind a proxy, in the proxy group). The runner
prefixes ``taskset -c <cores>`` and runs them from the repository root with
it on PYTHONPATH, so ``benches.apps.*`` import. A server with a `configure`
hook (nginx) gets it called with the run's `Launch` first, to write its config.

Adding a peer is one `Server(...)` entry in `SERVERS` (and an app module in
benches/apps/ if its interface is new). Entries with ``default=False`` run
only when named with ``--servers``: variants kept for checking that a
peer's default entry really is its fastest configuration.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benches import REPO_ROOT, catalog
from benches.apps.site import SITE_DIR
from benches.nginx import write_config
from benches.proxies import write_squid_config, write_tinyproxy_config
from benches.rust_peers import RUST_BIN_DIR
from benches.scenarios import Scenario
from benches.tls import CERTFILE, KEYFILE

RUSH_VENV = REPO_ROOT / ".venv"
BENCH_VENV = REPO_ROOT / ".venv-bench"
# Written by `benches.tools`: which peers failed to install, and why.
PEER_STATUS_FILE = BENCH_VENV / "peers-status.json"


@dataclass(frozen=True)
class Launch:
    """One start of one server: everything its command template may refer to."""

    app: str
    host: str
    port: int
    bin_dir: Path | None  # None for servers that do not run from a virtualenv
    workdir: Path
    workers: int = 1
    site_dir: Path = SITE_DIR
    # The origin behind a proxy (proxy group), for proxies that must be told which port CONNECT may reach.
    origin_port: int = 0

    def placeholders(self) -> dict[str, object]:
        return {
            **catalog.placeholders(),
            "bin": self.bin_dir or "",
            "host": self.host,
            "port": self.port,
            "workers": self.workers,
            "workdir": self.workdir,
            "site": self.site_dir,
            "rust_bin": RUST_BIN_DIR,
            "python": sys.executable,
            "origin_port": self.origin_port,
            "certfile": CERTFILE,
            "keyfile": KEYFILE,
        }


@dataclass(frozen=True)
class Server:
    name: str
    title: str
    venv: str  # "rush", "bench" or "system"
    apps: dict[str, tuple[str, ...]] = field(compare=False)
    version_argv: tuple[str, ...]
    probe: str = ""  # Python code that must run without error in the venv for the server to be usable
    requirements: tuple[str, ...] = ()
    # Installed with --no-deps after `requirements`: for a package whose declared pins cannot be met.
    requirements_without_deps: tuple[str, ...] = ()
    apt_packages: tuple[str, ...] = ()
    configure: Callable[[Launch], object] | None = field(default=None, compare=False)
    install_hint: str = "make bench-tools"
    default: bool = True
    notes: str = ""

    def venv_dir(self, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> Path | None:
        return {"rush": rush_venv, "bench": bench_venv}.get(self.venv)

    def serves(self, scenario: Scenario) -> bool:
        """Whether this server takes part in ``scenario``: it has the app, the scenario does not
        leave it out, and for several workers its command says how many."""
        argv = self.apps.get(scenario.app)
        if argv is None or not scenario.applies_to(self.name):
            return False
        return scenario.workers == 1 or any("{workers}" in part for part in argv)

    def command(self, launch: Launch) -> list[str]:
        values = launch.placeholders()
        return [part.format(**values) for part in self.apps[launch.app]]

    def executable(self, bin_dir: Path | None) -> Path | None:
        """The program every command of this server starts (None when it cannot be found)."""
        first = next(iter(self.apps.values()))[0]
        program = first.format(bin=bin_dir, rust_bin=RUST_BIN_DIR, python=sys.executable)
        if "/" in program:
            return Path(program)
        found = shutil.which(program)
        return Path(found) if found else None


def rush(app: str, *options: str) -> tuple[str, ...]:
    """rush serving ``app``, one worker unless ``options`` say otherwise, logging only warnings."""
    return ("{bin}/rush", app, "--host", "{host}", "--port", "{port}", "--log-level", "warning", *options)


def granian(interface: str, app: str, *options: str) -> tuple[str, ...]:
    """granian in its fastest one-worker set-up: a single-threaded runtime, HTTP/1 only, no
    websockets, and the pipeline flush that aggregates the writes of pipelined responses."""
    return (
        "{bin}/granian",
        "--interface",
        interface,
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--workers",
        "1",
        "--runtime-mode",
        "st",
        "--runtime-threads",
        "1",
        "--http",
        "1",
        "--no-ws",
        "--http1-pipeline-flush",
        "--backlog",
        "2048",
        "--log-level",
        "warning",
        "--no-access-log",
        *options,
        app,
    )


def granian_h2(interface: str, app: str, *options: str) -> tuple[str, ...]:
    """granian's set-up of `granian` speaking HTTP/2 only (``--http 2``: h2c with prior knowledge on
    a cleartext port), without the HTTP/1 pipeline flush, which has nothing to do there."""
    argv = [part for part in granian(interface, app, *options) if part != "--http1-pipeline-flush"]
    argv[argv.index("--http") + 1] = "2"
    return tuple(argv)


def hypercorn(app: str) -> tuple[str, ...]:
    """hypercorn on uvloop, one worker; it answers h2c with prior knowledge on its cleartext port.
    Its keep-alive timeout (5 s by default) is raised so the idle scenario's connections, opened
    over a few seconds, are all still open when the RSS is read; busy connections never reach it."""
    return (
        "{bin}/hypercorn",
        "--bind",
        "{host}:{port}",
        "--workers",
        "1",
        "--worker-class",
        "uvloop",
        "--backlog",
        "2048",
        "--keep-alive",
        "120",
        "--log-level",
        "warning",
        app,
    )


def hypercorn_h3(app: str) -> tuple[str, ...]:
    """hypercorn as `hypercorn` sets it up, serving HTTPS on TCP and HTTP/3 on UDP (aioquic) on one
    port number, with benches/tls.py's certificate."""
    return (
        *hypercorn(app)[:-1],
        "--quic-bind",
        "{host}:{port}",
        "--certfile",
        "{certfile}",
        "--keyfile",
        "{keyfile}",
        app,
    )


def granian_ws(interface: str, app: str, *options: str) -> tuple[str, ...]:
    """granian's set-up of `granian` with WebSocket on (the hello entries turn it off)."""
    return tuple(part for part in granian(interface, app, *options) if part != "--no-ws")


def uvicorn(app: str) -> tuple[str, ...]:
    return (
        "{bin}/uvicorn",
        app,
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--workers",
        "1",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--interface",
        "asgi3",
        "--lifespan",
        "off",
        "--backlog",
        "2048",
        "--no-access-log",
        "--log-level",
        "warning",
    )


def gunicorn(worker_class: str, app: str) -> tuple[str, ...]:
    return (
        "{bin}/gunicorn",
        "--bind",
        "{host}:{port}",
        "--workers",
        "1",
        "--worker-class",
        worker_class,
        "--backlog",
        "2048",
        "--log-level",
        "warning",
        app,
    )


def python_module(module: str) -> tuple[str, ...]:
    """A peer started by one of our launcher modules (servers without a command line of their own)."""
    return ("{bin}/python", "-m", module, "--host", "{host}", "--port", "{port}")


def catalog_apps(argv: tuple[str, ...], cache_env: bool = True, warm_options: tuple[str, ...] = ()) -> dict:
    """The catalog apps of a server (``catalog-{warm,cold}-{database}``, benches/catalog.py): ``argv``
    started through ``env`` with the database's URL. ``cache_env`` says whether the front end's own
    cache (``CATALOG_CACHE``) is on when warm; ``warm_options`` are added to warm commands (rush's
    ``--cache`` in front of a WSGI app whose own cache stays off)."""
    apps = {}
    for database in catalog.DATABASES:
        for state in ("warm", "cold"):
            cache = "1" if state == "warm" and cache_env else "0"
            options = warm_options if state == "warm" else ()
            apps[f"catalog-{state}-{database}"] = (
                "/usr/bin/env",
                f"CATALOG_DB={{catalog_{database}}}",
                f"CATALOG_CACHE={cache}",
                # The query counter (GET /_catalog/stats), read around each measured window.
                "CATALOG_ADMIN=1",
                *argv,
                *options,
            )
    return apps


def catalog_shared_app(argv: tuple[str, ...]) -> dict:
    """The shared-level row's app (``catalog-shared-sqlite``): ``argv`` runs two workers, its own
    cache on, backed by the run's Redis server (``CATALOG_REDIS``)."""
    return {
        f"{catalog.SHARED_PREFIX}sqlite": (
            "/usr/bin/env",
            "CATALOG_DB={catalog_sqlite}",
            "CATALOG_CACHE=1",
            "CATALOG_REDIS={catalog_redis}",
            *argv,
        )
    }


def with_workers(argv: tuple[str, ...], workers: int) -> tuple[str, ...]:
    """``argv`` with its ``--workers`` value replaced."""
    index = argv.index("--workers")
    return (*argv[: index + 1], str(workers), *argv[index + 2 :])


NGINX = ("nginx", "-p", "{workdir}", "-c", "{workdir}/nginx.conf", "-e", "stderr", "-g", "daemon off;")


def nginx_configurer(open_file_cache: bool) -> Callable[[Launch], object]:
    def configure(launch: Launch) -> object:
        return write_config(
            launch.app,
            host=launch.host,
            port=launch.port,
            workdir=launch.workdir,
            site_dir=launch.site_dir,
            open_file_cache=open_file_cache,
        )

    return configure


def rust_peer(binary: str) -> tuple[str, ...]:
    return (f"{{rust_bin}}/{binary}", "--host", "{host}", "--port", "{port}", "--workers", "{workers}")


def concurrency_example(name: str, title: str) -> Server:
    """A teaching server from examples/concurrency/ (stdlib only: it runs on rush's venv Python)."""
    return Server(
        name=name,
        title=title,
        venv="rush",
        apps={"root": ("{bin}/python", f"examples/concurrency/{name.replace('-', '_')}.py", "{port}", "{host}")},
        version_argv=("{bin}/python", "--version"),
        install_hint="make build",
        notes="teaching example, stdlib only",
    )


GRANIAN_STATIC = ("--static-path-route", "/static", "--static-path-mount", "{site}")
# The tls group: every server serves benches/tls.py's certificate.
GRANIAN_TLS = ("--ssl-certificate", "{certfile}", "--ssl-keyfile", "{keyfile}")
# The idle scenarios hold connections longer than the default 5 s keep-alive timeout; busy
# connections never reach it.
RUSH_H2 = ("--http", "auto", "--keep-alive-timeout", "120")
RUSH_TLS = ("--ssl-certfile", "{certfile}", "--ssl-keyfile", "{keyfile}")
# The http3 group: HTTP/3 on UDP beside HTTPS on TCP, on the one port (issue 35's --http3).
RUSH_H3 = ("--http3", *RUSH_TLS)
# granian serves a directory's index only through --static-path-dir-to-file; a path without a file
# under the route falls through to the app, which answers /easter, /hello and the 404.
GRANIAN_SITE_ROOT = (
    "--static-path-route",
    "/",
    "--static-path-mount",
    "{site}",
    "--static-path-dir-to-file",
    "index.html",
)

# The previous build of rush, to measure a change against (not a default server): the
# `rush` package with its compiled extension, copied into this folder, e.g. from a
# checkout of the older commit after `make build`: cp -r python/rush BENCH_BASELINE/.
RUSH_BASELINE = Path(__file__).resolve().parent / ".tools" / "rush-baseline"


def rush_baseline(app: str, *options: str) -> tuple[str, ...]:
    """The baseline build serving ``app`` (same flags as :func:`rush`)."""
    return ("/usr/bin/env", f"PYTHONPATH={RUSH_BASELINE}", "{bin}/python", "-m", "rush", *rush(app, *options)[1:])


RUSH_PROXY = (
    "{bin}/rush",
    "proxy",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--workers",
    "1",
    "--allow-private",
    # CONNECT reaches 443 only unless told; the benchmark's origin has a port of its own.
    "--allow-connect-port",
    "{origin_port}",
    "--no-access-log",
    "--log-level",
    "warning",
)
# Who serves the origin behind the proxies in the proxy group.
ORIGIN_SERVER = "nginx"


def squid_configurer(launch: Launch) -> object:
    return write_squid_config(launch.host, launch.port, launch.workdir)


def tinyproxy_configurer(launch: Launch) -> object:
    return write_tinyproxy_config(launch.host, launch.port, launch.workdir)


SERVERS: list[Server] = [
    Server(
        name="rush",
        title="rush",
        venv="rush",
        apps={
            "hello": rush("benches.apps.rush_app:app", "--workers", "1"),
            "root": rush("benches.apps.rush_app:app", "--workers", "{workers}"),
            "rush-v2": rush("benches.apps.rush_v2_app:app", "--workers", "1"),
            "static": rush("benches.apps.rush_static_app:app", "--workers", "1"),
            "wsgi": rush("benches.apps.wsgi_app:app", "--interface", "wsgi", "--workers", "1"),
            "asgi": rush("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1"),
            "flask": rush("benches.apps.flask_app:app", "--interface", "wsgi", "--workers", "1"),
            "fastapi": rush("benches.apps.fastapi_app:app", "--interface", "asgi", "--workers", "1"),
            "starlette-file": rush("benches.apps.starlette_file_app:app", "--interface", "asgi", "--workers", "1"),
            # The catalog's rush App, with its native cache when warm (CATALOG_CACHE).
            **catalog_apps(rush("examples.catalog.rush_app:app", "--workers", "1")),
            **catalog_shared_app(rush("examples.catalog.rush_app:app", "--workers", "2")),
            # The origin is on loopback, which `rush proxy` refuses unless told.
            "proxy": RUSH_PROXY,
            "tls-hello": rush("benches.apps.rush_app:app", "--workers", "1", *RUSH_TLS),
            "tls-static": rush("benches.apps.rush_static_app:app", "--workers", "1", *RUSH_TLS),
            # The App's WebSocket routes and its native rush.Broadcast group.
            "ws": rush("benches.apps.ws_rush_app:app", "--workers", "1"),
            # The http2 group: with --http auto rush serves h2c (prior knowledge, told by the first
            # bytes) and HTTP/1.1 on one port; its default is still HTTP/1.1 only.
            "h2-hello": rush("benches.apps.rush_app:app", "--workers", "1", *RUSH_H2),
            "h2-asgi": rush("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1", *RUSH_H2),
            "h2-wsgi": rush("benches.apps.wsgi_app:app", "--interface", "wsgi", "--workers", "1", *RUSH_H2),
            "h2-static": rush("benches.apps.rush_static_app:app", "--workers", "1", *RUSH_H2),
            # The http3 group: HTTP/3 beside HTTPS (--http3), and the same apps over HTTPS alone.
            "h3-hello": rush("benches.apps.rush_app:app", "--workers", "1", *RUSH_H3),
            "h3-asgi": rush("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1", *RUSH_H3),
            "h3-static": rush("benches.apps.rush_static_app:app", "--workers", "1", *RUSH_H3),
            "tls-asgi": rush("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1", *RUSH_TLS),
        },
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        install_hint="make build",
        notes="a supervisor process forks the workers; CPU and RSS count all of them",
    ),
    Server(
        name="rush-asgi",
        title="rush (ASGI, raw app)",
        venv="rush",
        apps={"ws": rush("benches.apps.ws_asgi_app:app", "--interface", "asgi", "--workers", "1")},
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        install_hint="make build",
        notes="the websocket group's plain ASGI app (benches/apps/ws_asgi_app.py), the same one uvicorn and "
        "granian serve",
    ),
    Server(
        name="rush-starlette",
        title="rush (ASGI, Starlette)",
        venv="rush",
        apps={"ws": rush("benches.apps.ws_starlette_app:app", "--interface", "asgi", "--workers", "1")},
        probe="import rush._rush, starlette",
        version_argv=("{bin}/rush", "--version"),
        install_hint="make build",
        notes="Starlette's WebSocketRoutes (benches/apps/ws_starlette_app.py)",
    ),
    Server(
        name="rush-flask",
        title="rush (WSGI) serving the Flask twin, rush's cache in front",
        venv="rush",
        apps=catalog_apps(
            rush("examples.catalog.flask_app:app", "--interface", "wsgi", "--workers", "1"),
            cache_env=False,
            warm_options=("--cache", catalog.RUSH_CACHE_FLAG),
        ),
        probe="import rush._rush, flask_sqlalchemy, flask_caching",
        version_argv=("{bin}/rush", "--version"),
        install_hint="make build",
        notes="the catalog's Flask twin unchanged, Flask-Caching off, rush's native cache (--cache) when warm",
    ),
    Server(
        name="rush-metrics",
        title="rush --metrics",
        venv="rush",
        apps={
            # Port 0: the counters are kept and served on a free port, not scraped.
            "hello": rush("benches.apps.rush_app:app", "--workers", "1", "--metrics", "127.0.0.1:0"),
        },
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        install_hint="make build",
        default=False,
        notes="rush with --metrics on, to measure what counting costs",
    ),
    Server(
        name="rush-baseline",
        title="rush (baseline build)",
        venv="rush",
        apps={
            "hello": rush_baseline("benches.apps.rush_app:app", "--workers", "1"),
            "ws": rush_baseline("benches.apps.ws_rush_app:app", "--workers", "1"),
            "static": rush_baseline("benches.apps.rush_static_app:app", "--workers", "1"),
            "wsgi": rush_baseline("benches.apps.wsgi_app:app", "--interface", "wsgi", "--workers", "1"),
            "asgi": rush_baseline("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1"),
            "flask": rush_baseline("benches.apps.flask_app:app", "--interface", "wsgi", "--workers", "1"),
            "fastapi": rush_baseline("benches.apps.fastapi_app:app", "--interface", "asgi", "--workers", "1"),
            **catalog_apps(rush_baseline("examples.catalog.rush_app:app", "--workers", "1")),
            "starlette-file": rush_baseline(
                "benches.apps.starlette_file_app:app", "--interface", "asgi", "--workers", "1"
            ),
            "tls-hello": rush_baseline("benches.apps.rush_app:app", "--workers", "1", *RUSH_TLS),
            "h2-hello": rush_baseline("benches.apps.rush_app:app", "--workers", "1", *RUSH_H2),
            "h2-asgi": rush_baseline("benches.apps.asgi_app:app", "--interface", "asgi", "--workers", "1", *RUSH_H2),
            "h2-wsgi": rush_baseline("benches.apps.wsgi_app:app", "--interface", "wsgi", "--workers", "1", *RUSH_H2),
            "h2-static": rush_baseline("benches.apps.rush_static_app:app", "--workers", "1", *RUSH_H2),
            "proxy": ("/usr/bin/env", f"PYTHONPATH={RUSH_BASELINE}", "{bin}/python", "-m", "rush", *RUSH_PROXY[1:]),
        },
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        install_hint="copy an older build's python/rush into benches/.tools/rush-baseline/",
        default=False,
        notes="the previous build of rush (benches/.tools/rush-baseline), to measure a change against",
    ),
    Server(
        name="rush-baseline-asgi",
        title="rush (baseline build), ASGI WebSocket",
        venv="rush",
        apps={"ws": rush_baseline("benches.apps.ws_asgi_app:app", "--interface", "asgi", "--workers", "1")},
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        install_hint="copy an older build's python/rush into benches/.tools/rush-baseline/",
        default=False,
        notes="rush-asgi's websocket app on the baseline build",
    ),
    Server(
        name="granian-rsgi",
        title="granian (RSGI)",
        venv="bench",
        apps={
            "hello": granian("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop"),
            "rush-v2": granian("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop", *GRANIAN_SITE_ROOT),
            "static": granian("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop", *GRANIAN_STATIC),
            "tls-hello": granian("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop", *GRANIAN_TLS),
            "tls-static": granian(
                "rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop", *GRANIAN_STATIC, *GRANIAN_TLS
            ),
            "ws": granian_ws("rsgi", "benches.apps.ws_rsgi_app:app", "--loop", "uvloop"),
            "h2-hello": granian_h2("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop"),
            "h2-static": granian_h2("rsgi", "benches.apps.rsgi_app:app", "--loop", "uvloop", *GRANIAN_STATIC),
        },
        probe="import granian, uvloop",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "uvloop"),
        notes="single-threaded runtime on uvloop, HTTP/1 only (HTTP/2 only, --http 2, in the http2 group), "
        "pipeline flush on; static files by its own mount",
    ),
    Server(
        name="granian-rsgi-plain",
        title="granian (RSGI, no experimental flags)",
        venv="bench",
        apps={
            "hello": (
                "{bin}/granian",
                "--interface",
                "rsgi",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--workers",
                "1",
                "--loop",
                "uvloop",
                "--http",
                "1",
                "--no-ws",
                "--log-level",
                "warning",
                "benches.apps.rsgi_app:app",
            )
        },
        probe="import granian, uvloop",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "uvloop"),
        default=False,
        notes="variant without --http1-pipeline-flush, to confirm which granian set-up is fastest",
    ),
    Server(
        name="granian-wsgi",
        title="granian (WSGI)",
        venv="bench",
        apps={
            "hello": granian("wsgi", "benches.apps.wsgi_app:app", "--blocking-threads", "1"),
            "wsgi": granian("wsgi", "benches.apps.wsgi_app:app", "--blocking-threads", "1"),
            "flask": granian("wsgi", "benches.apps.flask_app:app", "--blocking-threads", "1"),
            "h2-wsgi": granian_h2("wsgi", "benches.apps.wsgi_app:app", "--blocking-threads", "1"),
        },
        probe="import granian, flask",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "flask"),
        notes="single-threaded runtime, one blocking thread for the app, HTTP/1 only (HTTP/2 only, --http 2, "
        "in the http2 group), pipeline flush on",
    ),
    Server(
        name="granian-asgi",
        title="granian (ASGI)",
        venv="bench",
        apps={
            "hello": granian("asgi", "benches.apps.asgi_app:app", "--loop", "uvloop"),
            "asgi": granian("asgi", "benches.apps.asgi_app:app", "--loop", "uvloop"),
            "fastapi": granian("asgi", "benches.apps.fastapi_app:app", "--loop", "uvloop"),
            "starlette-file": granian("asgi", "benches.apps.starlette_file_app:app", "--loop", "uvloop"),
            "ws": granian_ws("asgi", "benches.apps.ws_asgi_app:app", "--loop", "uvloop"),
            "h2-asgi": granian_h2("asgi", "benches.apps.asgi_app:app", "--loop", "uvloop"),
        },
        probe="import granian, uvloop, fastapi",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "uvloop", "fastapi"),
        notes="single-threaded runtime on uvloop, HTTP/1 only (HTTP/2 only, --http 2, in the http2 group), "
        "pipeline flush on",
    ),
    Server(
        name="hypercorn",
        title="hypercorn (ASGI, uvloop)",
        venv="bench",
        apps={"h2-asgi": hypercorn("benches.apps.asgi_app:app")},
        probe="import hypercorn, h2, uvloop",
        version_argv=(
            "{bin}/python",
            "-c",
            "import importlib.metadata as m; print('hypercorn', m.version('hypercorn'))",
        ),
        requirements=("hypercorn", "uvloop"),
        notes="http2 group only: h2c with prior knowledge by the h2 library, uvloop worker, --keep-alive 120",
    ),
    Server(
        name="hypercorn-h3",
        title="hypercorn (ASGI, uvloop, HTTP/3 by aioquic)",
        venv="bench",
        # The same command for the group's HTTP/2 and HTTP/1.1 rows (HTTPS on TCP, ALPN h2 or http/1.1).
        apps={
            "h3-asgi": hypercorn_h3("benches.apps.asgi_app:app"),
            "tls-asgi": hypercorn_h3("benches.apps.asgi_app:app"),
        },
        probe="import hypercorn, aioquic, uvloop",
        version_argv=(
            "{bin}/python",
            "-c",
            "import importlib.metadata as m; "
            "print('hypercorn', m.version('hypercorn') + '+aioquic-' + m.version('aioquic'))",
        ),
        # hypercorn's h3 extra brings aioquic, which --quic-bind needs.
        requirements=("hypercorn[h3]", "uvloop"),
        notes="http3 group only: --quic-bind (QUIC and HTTP/3 by aioquic, pure Python above OpenSSL's "
        "crypto) beside HTTPS on TCP, uvloop worker, --keep-alive 120",
    ),
    Server(
        name="uvicorn",
        title="uvicorn (ASGI, uvloop + httptools)",
        venv="bench",
        apps={
            "hello": uvicorn("benches.apps.asgi_app:app"),
            "rush-v2": uvicorn("benches.apps.asgi_app:app"),
            "asgi": uvicorn("benches.apps.asgi_app:app"),
            "fastapi": uvicorn("benches.apps.fastapi_app:app"),
            "starlette-file": uvicorn("benches.apps.starlette_file_app:app"),
            "tls-hello": (
                *uvicorn("benches.apps.asgi_app:app"),
                "--ssl-certfile",
                "{certfile}",
                "--ssl-keyfile",
                "{keyfile}",
            ),
            # The catalog's FastAPI app, with its in-process TTL cache when warm.
            **catalog_apps(uvicorn("examples.catalog.fastapi_app:app")),
            # WebSocket by the websockets library (uvicorn's default when it is installed).
            "ws": (*uvicorn("benches.apps.ws_asgi_app:app"), "--ws", "websockets"),
        },
        probe="import uvicorn, uvloop, httptools, fastapi",
        version_argv=("{bin}/uvicorn", "--version"),
        requirements=("uvicorn[standard]", "fastapi", "psycopg[binary]", "psycopg_pool", "PyMySQL", "cachetools"),
        notes="serves no static files: left out of the static-file scenarios; WebSocket by websockets",
    ),
    Server(
        name="uvicorn-h2",
        title="uvicorn (ASGI, HTTP/2 by zttp)",
        venv="bench",
        apps={
            "h2-asgi": (
                *("zttp" if part == "httptools" else part for part in uvicorn("benches.apps.asgi_app:app")),
                "--http2",
                # As hypercorn's: the idle scenario holds connections beyond the default 5 s.
                "--timeout-keep-alive",
                "120",
            )
        },
        probe="import uvicorn, uvloop, zttp",
        version_argv=("{bin}/uvicorn", "--version"),
        requirements=("uvicorn[standard]", "zttp"),
        notes="http2 group only: uvicorn's experimental --http2, which needs the zttp parser (--http zttp); "
        "--timeout-keep-alive 120",
    ),
    Server(
        name="uvicorn-wsproto",
        title="uvicorn (ASGI, WebSocket by wsproto)",
        venv="bench",
        apps={"ws": (*uvicorn("benches.apps.ws_asgi_app:app"), "--ws", "wsproto")},
        probe="import uvicorn, uvloop, httptools, wsproto",
        version_argv=("{bin}/uvicorn", "--version"),
        requirements=("uvicorn[standard]", "wsproto"),
        notes="uvicorn's other WebSocket implementation (sans-IO wsproto), the same raw ASGI app",
    ),
    Server(
        name="uvicorn-starlette",
        title="uvicorn (ASGI, Starlette, WebSocket by websockets)",
        venv="bench",
        apps={"ws": (*uvicorn("benches.apps.ws_starlette_app:app"), "--ws", "websockets")},
        probe="import uvicorn, uvloop, httptools, starlette",
        version_argv=("{bin}/uvicorn", "--version"),
        requirements=("uvicorn[standard]", "starlette"),
        default=False,
        notes="the Starlette app of rush-starlette under uvicorn, for the framework's share",
    ),
    Server(
        name="gunicorn-meinheld",
        title="gunicorn with meinheld workers (WSGI)",
        venv="bench",
        apps={
            "hello": gunicorn("egg:meinheld#gunicorn_worker", "benches.apps.wsgi_app:app"),
            "wsgi": gunicorn("egg:meinheld#gunicorn_worker", "benches.apps.wsgi_app:app"),
            "flask": gunicorn("egg:meinheld#gunicorn_worker", "benches.apps.flask_app:app"),
        },
        probe="import gunicorn, meinheld.server, flask",
        version_argv=("{bin}/python", "-c", "import importlib.metadata as m; print('meinheld', m.version('meinheld'))"),
        requirements=("gunicorn", "greenlet", "flask"),
        # meinheld 1.0.2 (its last release) pins greenlet<0.5, which does not compile on Python 3.11;
        # meinheld itself builds, and runs on a current greenlet.
        requirements_without_deps=("meinheld",),
        notes="meinheld installed without its greenlet<0.5 pin (unbuildable on 3.11), on a current greenlet",
    ),
    Server(
        name="gunicorn",
        title="gunicorn, sync worker (WSGI)",
        venv="bench",
        apps={
            "flask": gunicorn("sync", "benches.apps.flask_app:app"),
            # The catalog's Flask twin as spkrepo runs it: Flask-Caching (SimpleCache) when warm.
            **catalog_apps(gunicorn("sync", "examples.catalog.flask_app:app")),
            # spkrepo's production: Flask-Caching's RedisCache, shared by the workers.
            **catalog_shared_app(with_workers(gunicorn("sync", "examples.catalog.flask_app:app"), 2)),
        },
        probe="import gunicorn, flask",
        version_argv=("{bin}/gunicorn", "--version"),
        requirements=(
            "gunicorn",
            "flask",
            "Flask-SQLAlchemy",
            "Flask-Caching",
            "psycopg[binary]",
            "PyMySQL",
            "redis",
        ),
        notes="the default worker: one request at a time, and a new connection per request (no keep-alive)",
    ),
    Server(
        name="bjoern",
        title="bjoern (WSGI)",
        venv="bench",
        apps={
            "hello": python_module("benches.apps.bjoern_server"),
            "wsgi": python_module("benches.apps.bjoern_server"),
        },
        probe="import bjoern",
        version_argv=("{bin}/python", "-c", "import importlib.metadata as m; print('bjoern', m.version('bjoern'))"),
        requirements=("bjoern",),
        apt_packages=("libev-dev",),
    ),
    Server(
        name="fastwsgi",
        title="fastwsgi (WSGI)",
        venv="bench",
        apps={
            "hello": python_module("benches.apps.fastwsgi_server"),
            "wsgi": python_module("benches.apps.fastwsgi_server"),
        },
        probe="import fastwsgi",
        version_argv=("{bin}/python", "-c", "import importlib.metadata as m; print('fastwsgi', m.version('fastwsgi'))"),
        requirements=("fastwsgi",),
    ),
    Server(
        name="socketify",
        title="socketify (native API)",
        venv="bench",
        apps={
            "hello": python_module("benches.apps.socketify_app"),
            # Its native WebSocket API: app.ws() handlers, and app.publish() for the broadcast.
            "ws": python_module("benches.apps.ws_socketify_app"),
        },
        probe="import socketify",
        version_argv=(
            "{bin}/python",
            "-c",
            "import importlib.metadata as m; print('socketify', m.version('socketify'))",
        ),
        requirements=("socketify",),
        notes="its native App API (uWebSockets underneath), faster than its own WSGI and ASGI layers",
    ),
    Server(
        name="nginx",
        title="nginx",
        venv="system",
        apps={
            "hello": NGINX,
            "rush-v2": NGINX,
            "static": NGINX,
            "tls-hello": NGINX,
            "tls-static": NGINX,
            "h2-hello": NGINX,
            "h2-static": NGINX,
        },
        version_argv=("nginx", "-v"),
        apt_packages=("nginx",),
        configure=nginx_configurer(open_file_cache=False),
        notes="the native reference: one worker process, access log off, config from benches/nginx.py",
    ),
    Server(
        name="nginx-ofc",
        title="nginx with open_file_cache",
        venv="system",
        apps={"rush-v2": NGINX, "static": NGINX, "h2-static": NGINX},
        version_argv=("nginx", "-v"),
        apt_packages=("nginx",),
        configure=nginx_configurer(open_file_cache=True),
        notes="as nginx, plus open_file_cache (descriptors and metadata of open files kept)",
    ),
    concurrency_example("blocking-loop", "blocking single loop"),
    concurrency_example("fork-per-request", "fork per request"),
    concurrency_example("thread-per-request", "thread per request"),
    concurrency_example("prefork", "prefork (processes accepting)"),
    concurrency_example("threadpool-main-accept", "thread pool, accept in the main thread"),
    concurrency_example("threadpool-worker-accept", "thread pool, accept in the workers"),
    concurrency_example("busy-loop", "non-blocking busy loop"),
    concurrency_example("select-loop", "select"),
    concurrency_example("epoll-loop", "epoll"),
    Server(
        name="actix-web",
        title="actix-web (Rust)",
        venv="system",
        apps={"root": rust_peer("actix-hello")},
        version_argv=("{python}", "-m", "benches.rust_peers", "version", "actix-web"),
        install_hint="make bench-tools (builds benches/rust with cargo)",
        notes="workers(N): N threads, each with its own single-threaded runtime, plus an accept thread",
    ),
    Server(
        name="hyper",
        title="hyper (Rust)",
        venv="system",
        apps={"root": rust_peer("hyper-hello")},
        version_argv=("{python}", "-m", "benches.rust_peers", "version", "hyper"),
        install_hint="make bench-tools (builds benches/rust with cargo)",
        notes="tokio current-thread runtime for 1 worker, multi-thread runtime with N threads otherwise",
    ),
    Server(
        name="squid",
        title="squid",
        venv="system",
        apps={"proxy": ("squid", "-N", "-f", "{workdir}/squid.conf")},
        version_argv=("squid", "-v"),
        apt_packages=("squid",),
        configure=squid_configurer,
        notes="forward proxy peer: one process (-N), no cache, access log off, config from benches/proxies.py",
    ),
    Server(
        name="tinyproxy",
        title="tinyproxy",
        venv="system",
        apps={"proxy": ("tinyproxy", "-d", "-c", "{workdir}/tinyproxy.conf")},
        version_argv=("tinyproxy", "-v"),
        apt_packages=("tinyproxy",),
        configure=tinyproxy_configurer,
        notes="forward proxy peer: a thread per client, logging critical only, config from benches/proxies.py",
    ),
    Server(
        name="proxy.py",
        title="proxy.py",
        venv="bench",
        apps={
            "proxy": (
                "{bin}/proxy",
                "--hostname",
                "{host}",
                "--port",
                "{port}",
                "--num-workers",
                "1",
                "--num-acceptors",
                "1",
                "--log-level",
                "WARNING",
            )
        },
        probe="import proxy",
        version_argv=("{bin}/proxy", "--version"),
        requirements=("proxy.py",),
        notes="forward proxy peer in Python (PyPI proxy.py): one acceptor and one worker",
    ),
]


def server_names(include_variants: bool = True) -> list[str]:
    return [server.name for server in SERVERS if include_variants or server.default]


def select_servers(names: list[str] | None) -> list[Server]:
    """The servers named (in registry order), or every default one. Unknown names raise ValueError."""
    if not names:
        return [server for server in SERVERS if server.default]
    known = {server.name for server in SERVERS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown server(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [server for server in SERVERS if server.name in names]


def peer_install_notes(status_file: Path = PEER_STATUS_FILE) -> dict[str, str]:
    """Server name -> why it is not installed, as recorded by `benches.tools` (empty when all went well)."""
    try:
        status = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return {}
    return {name: entry.get("note", "") for name, entry in status.items() if not entry.get("ok", False)}


def unavailable_reason(server: Server, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> str | None:
    """Why ``server`` cannot run here (None when it can): missing venv, executable or importable module."""
    venv = server.venv_dir(rush_venv, bench_venv)
    if venv is not None and not (venv / "bin" / "python").exists():
        hint = "make build" if server.venv == "rush" else "make bench-tools"
        return f"no virtualenv at {venv} (run `{hint}`)"
    executable = server.executable(venv / "bin" if venv else None)
    if executable is None or not executable.exists():
        install_note = peer_install_notes(bench_venv / PEER_STATUS_FILE.name).get(server.name)
        program = executable or next(iter(server.apps.values()))[0]
        return install_note or f"{program} is not installed (run `{server.install_hint}`)"
    if server.probe and venv is not None:
        python = venv / "bin" / "python"
        probe = subprocess.run(
            [str(python), "-c", server.probe], capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode != 0:
            last_line = (probe.stderr.strip().splitlines() or ["probe failed"])[-1]
            return f"`{server.probe}` fails in {venv}: {last_line}"
    return None


def server_version(server: Server, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> str:
    """``"<program> <version>"`` (e.g. ``"uvicorn 0.54.0"``), whatever the program's own wording."""
    venv = server.venv_dir(rush_venv, bench_venv)
    argv = [part.format(bin=venv / "bin" if venv else "", python=sys.executable) for part in server.version_argv]
    program = Path(argv[0]).name
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{program} unknown ({error})"
    output = (completed.stdout + completed.stderr).strip()
    match = re.search(r"\b\d+\.\d+(?:\.\d+)?\S*", output)
    if completed.returncode != 0 or not match:
        return f"{program} unknown (`{' '.join(argv[1:])}` failed)"
    # Launchers that print "<name> <version>" name the package better than the interpreter they ran in.
    named = re.fullmatch(r"([A-Za-z][\w.-]*) (\d\S*)", output)
    if named:
        return output
    return f"{program} {match.group(0)}"
