"""nginx as the native reference: a config generated per run, so nginx runs like any other peer.

`render_config` writes a whole ``nginx.conf`` for one run: one worker process,
access log off, listening on the run's host and port, and every path nginx
would write (pid file, temporary directories, error log) under the run's own
work directory, so nothing in /etc/nginx or /var is read or touched and two
runs never share state. nginx is then started in the foreground::

    nginx -p WORKDIR -c WORKDIR/nginx.conf -e stderr -g "daemon off;"

The server block depends on the app the scenario asks for (`benches.servers`):

- ``hello``: the hello endpoints answered by ``return`` directives (no file,
  no upstream): ``/`` plain text, ``/hello?name=`` from the query argument,
  ``/json``, the ``/easter`` redirect and a 404 for the rest;
- ``rush-v2``: the site directory at ``/`` (``index.html`` for ``/``), plus the
  ``/easter`` redirect and ``/hello``;
- ``static``: the site directory under ``/static/``;
- ``h2-hello``, ``h2-static``: the same over h2c (``listen ... http2``, the http2 group);
  ``keepalive_requests`` also bounds the requests of an HTTP/2 connection (nginx >= 1.19.7),
  which at its default of 1000 would end h2load's connections with a GOAWAY mid-run.

The rest follows Debian's stock nginx.conf (``sendfile on``, ``tcp_nopush on``),
with three changes that every run needs and that say nothing about speed:
``worker_connections`` high enough for the 1000-connection scenarios (the stock
768 would refuse them), ``keepalive_requests`` high enough that nginx does not
close wrk's connections every 1000 requests (no other server recycles its
connections), and a ``types`` map of the few extensions served, instead of
including /etc/nginx/mime.types. ``open_file_cache=True`` adds nginx's cache of
open file descriptors and metadata: the "nginx-ofc" peer.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from benches.tls import CERTFILE, KEYFILE

# A connection per client of the largest scenario (1000), with room for nginx's own descriptors.
WORKER_CONNECTIONS = 4096
KEEPALIVE_REQUESTS = 10_000_000

HELLO_LOCATIONS = """\
        location = / {
            return 200 "Hello, World!";
        }
        location = /hello {
            return 200 "Hello, $arg_name";
        }
        location = /json {
            default_type application/json;
            return 200 '{"message": "Hello, World!"}';
        }
        location = /easter {
            return 301 /egg;
        }
        location / {
            return 404;
        }"""

RUSH_V2_LOCATIONS = """\
        location = /easter {
            return 301 /egg;
        }
        location = /hello {
            return 200 "Hello, $arg_name";
        }
        location / {
            root SITE;
            index index.html;
        }"""

STATIC_LOCATIONS = """\
        location /static/ {
            alias SITE/;
        }
        location / {
            return 404;
        }"""

LOCATIONS = {"hello": HELLO_LOCATIONS, "rush-v2": RUSH_V2_LOCATIONS, "static": STATIC_LOCATIONS}

OPEN_FILE_CACHE = """\
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    open_file_cache_min_uses 1;
    open_file_cache_errors on;
"""


def worker_user() -> tuple[str, str] | None:
    """Who nginx's worker must run as, when we are root: ourselves (nginx started as root would
    otherwise switch its worker to ``nobody``, who may not be allowed to read the site under the
    repository). Not root: None, as nginx cannot switch users then and warns if told to."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name


def render_config(
    app: str,
    *,
    host: str,
    port: int,
    workdir: Path,
    site_dir: Path,
    open_file_cache: bool = False,
    user: tuple[str, str] | None = None,
) -> str:
    """The complete nginx.conf for serving ``app`` on ``host:port`` (raises KeyError for an app
    nginx has no configuration for)."""
    # The tls group's apps are the same sites served over TLS (benches/tls.py's certificate), the
    # http2 group's over h2c: "listen ... http2" without ssl is HTTP/2 with prior knowledge only.
    # (nginx 1.25.1 moved this to an "http2 on" directive; the listen parameter still works there,
    # with a deprecation warning. Debian 12 ships 1.22.)
    tls = app.startswith("tls-")
    h2c = app.startswith("h2-")
    locations = LOCATIONS[app.removeprefix("tls-").removeprefix("h2-")].replace("SITE", str(site_dir))
    listen = f"listen {host}:{port}{' http2' if h2c else ''} backlog=2048;"
    if tls:
        listen = (
            f"listen {host}:{port} ssl backlog=2048;\n"
            f"        ssl_certificate {CERTFILE};\n"
            f"        ssl_certificate_key {KEYFILE};\n"
            "        ssl_protocols TLSv1.3 TLSv1.2;"
        )
    user = user or worker_user()
    user_line = f"user {user[0]} {user[1]};\n" if user else ""
    temp = workdir / "temp"
    return f"""\
# Generated by benches/nginx.py for one benchmark run ({app}); edits are overwritten.
{user_line}worker_processes 1;
pid {workdir}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections {WORKER_CONNECTIONS};
}}

http {{
    access_log off;
    default_type text/plain;
    types {{
        text/html html;
        text/plain txt;
    }}
    sendfile on;
    tcp_nopush on;
    keepalive_requests {KEEPALIVE_REQUESTS};
    # nginx would otherwise redirect to http://host:port/egg; every other server sends /egg.
    absolute_redirect off;
    server_tokens off;
    # A missing file is a 404, not an error worth a log line per request (the 404 scenarios).
    log_not_found off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
{OPEN_FILE_CACHE if open_file_cache else ""}
    server {{
        {listen}
{locations}
    }}
}}
"""


def write_config(app: str, *, host: str, port: int, workdir: Path, site_dir: Path, open_file_cache: bool) -> Path:
    """Writes ``nginx.conf`` (and the temporary directories it names) into ``workdir``."""
    (workdir / "temp").mkdir(parents=True, exist_ok=True)
    path = workdir / "nginx.conf"
    path.write_text(
        render_config(app, host=host, port=port, workdir=workdir, site_dir=site_dir, open_file_cache=open_file_cache)
    )
    return path
