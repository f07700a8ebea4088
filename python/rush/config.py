"""`rush.Config`: every option of the server, in one place.

Each option is a dataclass field whose metadata carries its help text. The
CLI's flags are generated from these fields, every flag also reads the
environment variable ``RUSH_<FLAG>`` (``--max-body-size`` ->
``RUSH_MAX_BODY_SIZE``), and `rush.run` takes the same names as keyword
arguments. Precedence: keyword or flag, then the ``--config`` file
(config_file.py: a gunicorn.conf.py or TOML), then environment, then
default; `Config.sources` says which gave each value.

`Config.validate` checks every option before anything is bound or forked,
and refuses a bad value with an `OptionError` (a ValueError) whose one-line
message names the flag, and the environment variable when the value came
from one: ``--keep-alive-timeout must be a finite number of seconds between
0 and 86400 (got inf)``. The limits keep every value inside what the native
loop and the kernel accept (timeouts become Rust Durations, sizes u64), and
the worker count under a cap (`worker_cap`) that only
``--allow-many-workers`` lifts, so a typo cannot fork until memory runs out.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from rush.values import OptionError, TlsError, flag_name, parse_bool, parse_size

ENVIRONMENT_PREFIX = "RUSH_"

# Longest timeout accepted: one day.
MAX_SECONDS = 86400
# Largest size or count accepted: it must fit a signed 64-bit integer.
MAX_SIZE = 2**63 - 1
# Most header fields a request may be allowed: the native parser reserves a
# slot per allowed field for every request head.
MAX_HEADERS_LIMIT = 10000
# Most threads per worker (--threads).
MAX_THREADS = 1024
# Even with --allow-many-workers, no more worker processes than this.
WORKERS_HARD_LIMIT = 4096
# --timeout: the default, and the shortest accepted (an idle worker's loop
# comes back once a second, so anything shorter would kill healthy workers).
DEFAULT_TIMEOUT = 60.0
MIN_TIMEOUT = 2.0


def worker_cap() -> int:
    """The most workers allowed without ``--allow-many-workers``: four per
    CPU, at least 32, at most 512."""
    return min(max(4 * (os.cpu_count() or 1), 32), 512)


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _proxy_headers_value(name: str, value: Any) -> str:
    """``--proxy-headers``' value: a family, or a boolean (on = x-forwarded)."""
    if isinstance(value, bool):
        return "x-forwarded" if value else "off"
    text = str(value).strip().lower()
    if text in ("x-forwarded", "forwarded", "off"):
        return text
    try:
        return "x-forwarded" if parse_bool(text) else "off"
    except ValueError:
        raise OptionError(name, "must be x-forwarded, forwarded, off, true or false", value) from None


def _option(default: Any, help: str, *, kind: str = "", metavar: str | None = None, short: str | None = None) -> Any:
    return field(default=default, metadata={"help": help, "kind": kind, "metavar": metavar, "short": short})


# Environment variables other servers read, honoured after RUSH_*: option -> variable.
ENVIRONMENT_ALIASES = {"forwarded_allow_ips": "FORWARDED_ALLOW_IPS"}

# uvicorn.run's keywords that rush names otherwise: an unknown-option error names rush's (the
# meanings match; uvicorn keywords with no counterpart here, such as limit_concurrency, get none).
UVICORN_KEYWORDS = {
    "timeout_keep_alive": "keep_alive_timeout",
    "timeout_graceful_shutdown": "graceful_timeout",
    "limit_max_requests": "max_requests",
    "limit_max_requests_jitter": "max_requests_jitter",
    "reload_dirs": "reload_dir",
    "reload_includes": "reload_include",
    "reload_excludes": "reload_exclude",
    "headers": "header",
}


@dataclass
class Sources:
    """Where each option's value came from (``origins``: option -> "command line",
    "keyword", "file PATH: NAME" with the name the file gave it, or "env
    VARIABLE"; defaults are absent), the config file's hooks (hook name ->
    function, or a TOML file's "module:function") and the warnings its
    reading left, logged once logging is set up."""

    origins: dict[str, str] = field(default_factory=dict)
    hooks: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# The options that say where to listen: the config file's give way to the command line's (a
# --fd replaces the file's bind, as gunicorn's -b does) and replace the environment's.
ADDRESS_OPTIONS = ("host", "port", "uds", "fd", "bind")


@dataclass
class Config:
    """Server options. ``app`` is an import string ``"module:attribute"`` or
    the application object itself."""

    app: Any = _option(None, "the application, as MODULE:ATTRIBUTE", metavar="APP")
    host: str = _option("127.0.0.1", "address to bind (use 0.0.0.0 for all interfaces)")
    port: int = _option(8000, "TCP port to bind")
    uds: str | None = _option(None, "bind a Unix domain socket at this path instead of TCP", metavar="PATH")
    fd: int | None = _option(
        None, "serve on this already-bound listening socket fd (systemd, supervisors)", metavar="N"
    )
    workers: int = _option(1, "worker processes (each runs one event loop on one core)", short="-w")
    allow_many_workers: bool = _option(
        False, "allow more workers than 4 per CPU (at least 32, at most 512), up to 4096", kind="bool"
    )
    backlog: int = _option(2048, "listen() backlog: connections the kernel queues before accepting")
    keep_alive_timeout: float = _option(5.0, "seconds an idle keep-alive connection stays open")
    header_timeout: float = _option(10.0, "seconds a client has to send a complete request head")
    body_timeout: float = _option(30.0, "seconds of silence allowed while a request body arrives")
    send_timeout: float = _option(30.0, "seconds of no write progress before a client is dropped")
    graceful_timeout: float = _option(
        30.0,
        "seconds in-flight requests get after SIGTERM/SIGINT, or when a reload, --max-requests or TTOU retires "
        "their worker; a worker still running then is killed",
    )
    max_body_size: int = _option(
        0,
        "largest request body in bytes, counted as it arrives, with or without a Content-Length (413 beyond; "
        "0: no limit, as uvicorn, hypercorn and gunicorn); suffixes K, M, G",
        kind="size",
    )
    max_spool_size: int = _option(
        4 * 1024**3,
        "request bodies a worker collects for WSGI, the rush App and ASGI static mounts, in memory and "
        "temporary files, summed; an upload that does not fit beside the others gets 503 with Retry-After, "
        "one larger than it 413 (0: no bound); suffixes K, M, G",
        kind="size",
    )
    max_connections: int = _option(10000, "open connections per worker; beyond it, accepting pauses")
    max_worker_output: int = _option(
        64 * 1024**2,
        "memory of unsent responses per worker, summed over its connections; beyond it, the connections "
        "holding the most output stop reading requests until their clients catch up; suffixes K, M, G",
        kind="size",
    )
    ws_max_size: int = _option(
        16 * 1024**2, "largest WebSocket message in bytes (closed with 1009 beyond); suffixes K, M, G", kind="size"
    )
    ws_max_queue: int = _option(32, "WebSocket messages queued for the app before reading pauses")
    ws_ping_interval: float = _option(20.0, "seconds of silence before the server pings a WebSocket client; 0 = off")
    ws_ping_timeout: float = _option(
        20.0, "seconds a WebSocket client has to answer a ping before it is dropped; 0 = off"
    )
    ws_per_message_deflate: bool = _option(
        True, "offer permessage-deflate compression to WebSocket clients", kind="bool"
    )
    ws_allowed_origins: list[str] = _option(
        None,
        "accept WebSocket handshakes only with this Origin, e.g. https://example.com (repeatable; env: "
        "comma-separated); others, and handshakes without one, get 403 before the app runs [default: any]",
        kind="list",
        metavar="ORIGIN",
    )
    max_request_line: int = _option(8192, "longest request line in bytes (414 beyond)", kind="size")
    max_head_size: int = _option(16384, "largest request head in bytes (431 beyond)", kind="size")
    max_headers: int = _option(100, "most header fields per request (431 beyond)")
    interface: str = _option("auto", "how to call the app: auto, rush (rush.App), wsgi or asgi")
    http: str = _option(
        "auto",
        "HTTP versions served: auto (both: h2c prior knowledge on a cleartext port, ALPN h2 then "
        "http/1.1 over TLS), 1 (HTTP/1.1 only) or 2 (HTTP/2 only)",
    )
    http3: bool = _option(
        False,
        "also serve HTTP/3 over QUIC, on UDP at the port of each TCP --bind (needs --ssl-certfile); "
        "TCP answers then carry Alt-Svc so browsers find it",
        kind="bool",
    )
    threads: int = _option(0, "run a blocking (WSGI) app on a pool of N threads per worker; 0 = on the event loop")
    root_path: str = _option("", "the path prefix the app is mounted under (WSGI SCRIPT_NAME, ASGI root_path)")
    lifespan: str = _option("auto", "ASGI lifespan events: auto (if the app supports them), on or off")
    static: list[str] = _option(
        None,
        "serve a directory natively: PREFIX=DIRECTORY (repeatable; env: comma-separated); no app needed",
        kind="mounts",
        metavar="PREFIX=DIR",
    )
    static_cache: str = _option("memory", "static file cache: memory (bodies in memory) or filesystem (sendfile)")
    static_cache_control: str | None = _option(
        None, "a Cache-Control value for every --static answer, e.g. 'public, max-age=3600'", metavar="VALUE"
    )
    cache: list[str] = _option(
        None,
        "cache a WSGI/ASGI app's answers natively: PATH:ttl=SECONDS[,vary_query=a|b,vary_headers=host,stale=S,"
        "statuses=200|404,lock_timeout=S,max_bytes=64M] (repeatable; env: ';'-separated)",
        kind="cache_specs",
        metavar="SPEC",
    )
    access_log: bool = _option(False, "log one line per request to stdout", kind="bool")
    ssl_certfile: list[str] = _option(
        None,
        "serve HTTPS: a certificate chain (PEM, leaf first); repeatable with --ssl-keyfile, chosen by SNI name",
        kind="mounts",
        metavar="PATH",
    )
    ssl_keyfile: list[str] = _option(
        None,
        "the private key of the --ssl-certfile in the same position (PEM: PKCS#8, PKCS#1 or SEC1); "
        "without it, each --ssl-certfile holds its own key",
        kind="mounts",
        metavar="PATH",
    )
    ssl_keyfile_password: str | None = _option(
        None,
        "the password of encrypted --ssl-keyfile keys (PKCS#8 or legacy PEM; needs the cryptography package); "
        "prefer --ssl-keyfile-password-file or the environment variable, which other users cannot read in the "
        "process list; rush removes the variable from its environment once the keys are loaded",
        metavar="PASSWORD",
    )
    ssl_keyfile_password_file: str | None = _option(
        None,
        "read the --ssl-keyfile-password from this file's first line (nginx's ssl_password_file)",
        metavar="PATH",
    )
    ssl_ca_certs: str | None = _option(None, "CA certificates that client certificates must chain to", metavar="PATH")
    ssl_cert_reqs: str = _option("none", "client certificates: none, optional or required (needs --ssl-ca-certs)")
    ssl_ciphers: str | None = _option(
        None, "only these cipher suites, comma-separated rustls names (e.g. TLS13_AES_256_GCM_SHA384)"
    )
    ssl_max_handshakes: int = _option(
        256, "most TLS handshakes in progress (a first byte arrived) per worker; newcomers past it are closed at once"
    )
    metrics: str | None = _option(
        None, "serve Prometheus metrics from the supervisor on HOST:PORT, e.g. 127.0.0.1:9100", metavar="HOST:PORT"
    )
    log_level: str = _option("info", "error, warning, info or debug")
    # Development and lifecycle (issue 14): gunicorn's and uvicorn's names.
    bind: list[str] = _option(
        None,
        "HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N to listen on, instead of --host/--port/--uds/--fd "
        "(repeatable: every worker serves every address; env: comma-separated)",
        kind="list",
        metavar="ADDRESS",
        short="-b",
    )
    timeout: float | None = _option(
        None,
        "kill and replace a worker whose loop has not come back for this many seconds (a handler stuck in "
        "a blocking call); 0 = off [default: 60, off with --reload]",
        metavar="SECONDS",
    )
    max_requests: int = _option(0, "replace a worker (gracefully, one at a time) after this many requests; 0 = off")
    max_requests_jitter: int = _option(0, "add 0 to N requests (random, per worker) to --max-requests")
    reload: bool = _option(False, "development: restart the workers when a watched file changes", kind="bool")
    reload_dir: list[str] = _option(
        None, "a directory to watch (repeatable; env: comma-separated) [default: the working directory]", kind="list"
    )
    reload_include: list[str] = _option(
        None, "a file pattern to watch (repeatable; env: comma-separated) [default: *.py]", kind="list"
    )
    reload_exclude: list[str] = _option(
        None, "a file or directory pattern not to watch (repeatable; env: comma-separated)", kind="list"
    )
    factory: bool = _option(False, "APP is a function returning the application: call it", kind="bool")
    preload: bool = _option(
        False,
        "import the application once in the supervisor and fork workers that share its memory "
        "(gunicorn's --preload); a SIGHUP then restarts the workers on the code imported at start",
        kind="bool",
    )
    app_dir: str = _option(".", "look for the application's module in this directory (added to sys.path)")
    chdir: str | None = _option(None, "change to this directory before anything else", metavar="DIR")
    env_file: str | None = _option(
        None, "load environment variables from this file (KEY=VALUE lines) before reading the options", metavar="PATH"
    )
    pid: str | None = _option(None, "write the supervisor's process id to this file", metavar="PATH")
    # Behind a proxy, response headers and log formats (uvicorn's and gunicorn's names).
    proxy_headers: str = _option(
        "x-forwarded",
        "read the client, scheme (and host, with --forwarded-host) from a trusted proxy's headers: "
        "x-forwarded (X-Forwarded-For/-Proto, as nginx sets them; the flag alone), forwarded (RFC 7239 "
        "Forwarded, exclusively) or off (--no-proxy-headers)",
        kind="proxy_headers",
        metavar="FAMILY",
    )
    forwarded_allow_ips: str = _option(
        "127.0.0.1,::1",
        "peers whose proxy headers are trusted: comma-separated IPs and CIDR networks, * for all; Unix-socket "
        "peers are always trusted; uvicorn's FORWARDED_ALLOW_IPS is read too",
        metavar="IPS",
    )
    forwarded_host: bool = _option(
        False, "also take the host from a trusted proxy (X-Forwarded-Host/-Port, Forwarded host=)", kind="bool"
    )
    proxy_protocol: bool = _option(
        False,
        "every connection starts with a PROXY protocol header (v1 or v2, HAProxy send-proxy), taken from "
        "--forwarded-allow-ips peers only: its client becomes the connection's; anything else is closed",
        kind="bool",
    )
    server_header: bool = _option(False, "send 'Server: rush' (unless the app sets its own)", kind="bool")
    date_header: bool = _option(True, "send a Date header (unless the app sets its own)", kind="bool")
    header: list[str] = _option(
        None,
        "add NAME:VALUE to every response (repeatable; env: one per line)",
        kind="headers",
        metavar="NAME:VALUE",
    )
    access_log_format: str | None = _option(
        None,
        'access log line in gunicorn\'s atoms, e.g. \'%(h)s "%(r)s" %(s)s %(b)s %(D)s "%(f)s" "%(a)s"\' '
        '(unset: ADDRESS:PORT - "REQUEST LINE" STATUS SIZE)',
        metavar="FORMAT",
    )
    log_format: str = _option("text", "log lines as text or json (one object per line)")
    log_config: str | None = _option(
        None, "configure logging with logging.config.dictConfig from a JSON or YAML file", metavar="PATH"
    )
    access_log_file: str | None = _option(
        None, "write the access log to this file instead of stdout (implies --access-log)", metavar="PATH"
    )
    error_log_file: str | None = _option(
        None, "write rush's error log (server events, tracebacks) to this file instead of stderr", metavar="PATH"
    )
    # Config files (issue 34): gunicorn's -c and -e.
    config: str | None = _option(
        None,
        "read settings from this file: a Python file in gunicorn's form (gunicorn.conf.py: its settings and "
        "server hooks), rush.toml, or pyproject.toml's [tool.rush]; flags win over it, it wins over RUSH_* variables",
        metavar="FILE",
        short="-c",
    )
    env: list[str] = _option(
        None,
        "set NAME=VALUE in the environment of the supervisor and the workers (repeatable; env: one per line), "
        "as gunicorn's -e/raw_env",
        kind="headers",
        metavar="NAME=VALUE",
        short="-e",
    )
    # Where each option's value came from, and the config file's hooks and warnings
    # (not an option: filled by from_sources).
    sources: Sources = field(default=None, repr=False, compare=False, metadata={"internal": True})  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.sources is None:
            self.sources = Sources()

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field[Any]]:
        return [option for option in cls.settable_fields() if option.name != "app"]

    @classmethod
    def settable_fields(cls) -> list[dataclasses.Field[Any]]:
        """Every option, the app included: what a flag, a keyword, a file or a variable may set."""
        return [option for option in fields(cls) if not option.metadata.get("internal")]

    @classmethod
    def from_sources(
        cls,
        explicit: Mapping[str, Any],
        environment: Mapping[str, str] | None = None,
        origin: str = "command line",
    ) -> Config:
        """Builds a Config from explicit values (flags or keywords, ``origin``
        says which; ``None`` means not given), then the config file
        (``--config``), then ``RUSH_*`` environment variables, then defaults:
        gunicorn's order, where the file wins over the environment's defaults."""
        known = {option.name: option for option in cls.settable_fields()}
        unknown = set(explicit) - set(known)
        if unknown:
            named = [
                f"{name} (uvicorn's name; rush's is {UVICORN_KEYWORDS[name]})" if name in UVICORN_KEYWORDS else name
                for name in sorted(unknown)
            ]
            raise TypeError(f"unknown option(s): {', '.join(named)}")
        given = {name: value for name, value in explicit.items() if value is not None}
        environment = os.environ if environment is None else environment
        sources = Sources()
        path = given.get("config", environment.get(ENVIRONMENT_PREFIX + "CONFIG"))
        if "config" not in {option.name for option in cls.option_fields()}:
            path = None  # `rush proxy` has no config file (ProxyConfig leaves the option out)
        from_file: dict[str, Any] = {}
        file_names: dict[str, str] = {}  # option -> how the file spelled it
        if path is not None:
            from rush.config_file import load

            settings = load(str(path), known)
            sources.hooks, sources.warnings = settings.hooks, settings.warnings
            for name, (value, spelled) in settings.values.items():
                try:
                    from_file[name] = cls.convert(known[name], value) if isinstance(value, str) else value
                except OptionError as error:
                    raise error.from_variable(_file_origin(str(path), spelled)) from None
                file_names[name] = spelled
        environment = _with_env_file({**from_file, **given}, environment)
        layers: list[tuple[str, dict[str, Any]]] = [
            ("explicit", given),
            ("file", from_file),
            ("env", {}),
        ]
        variables: dict[str, str] = {}  # option -> the environment variable that set it
        for name, option in known.items():
            if name in given or name in from_file:
                continue
            variable = ENVIRONMENT_PREFIX + name.upper()
            if name == "workers" and variable not in environment and "WEB_CONCURRENCY" in environment:
                # What Heroku, Render and gunicorn use for the number of workers.
                variable = "WEB_CONCURRENCY"
            text = environment.get(variable)
            if text is None and name in ENVIRONMENT_ALIASES:
                variable = ENVIRONMENT_ALIASES[name]
                text = environment.get(variable)
            if text is not None:
                variables[name] = variable
                try:
                    layers[2][1][name] = cls.convert(option, text)
                except OptionError as error:
                    raise error.from_variable(variable) from None
        # A file's addresses give way to those of the command line, and replace
        # the environment's (the command line and the environment together stay an error).
        for upper, lower in ((layers[0][1], layers[1][1]), (layers[1][1], layers[2][1])):
            if set(ADDRESS_OPTIONS) & set(upper):
                for name in ADDRESS_OPTIONS:
                    lower.pop(name, None)
        values: dict[str, Any] = {}
        for kind, layer in reversed(layers):
            for name, value in layer.items():
                values[name] = value
                if kind == "explicit":
                    sources.origins[name] = origin
                elif kind == "file":
                    sources.origins[name] = "file " + _file_origin(str(path), file_names[name])
                else:
                    sources.origins[name] = f"env {variables[name]}"
        config = cls(**values)
        config.sources = sources
        try:
            address = [name for name in ("host", "port", "uds", "fd") if name in values]
            if "bind" in values and address:
                raise OptionError(
                    "bind",
                    f"cannot be combined with {', '.join(map(flag_name, address))}: give every address with --bind",
                    values["bind"],
                )
            config.validate()
        except OptionError as error:
            where = sources.origins.get(error.name, "")
            if where.startswith("env "):
                raise error.from_variable(where[4:]) from None
            if where.startswith("file "):
                raise error.from_variable(where[5:]) from None
            raise
        return config

    @staticmethod
    def convert(option: dataclasses.Field[Any], text: str) -> Any:
        """Converts a string (from the environment or a flag) to the option's
        type; raises `OptionError` if it is not one."""
        kind = option.metadata.get("kind")
        if kind == "mounts":
            return [item.strip() for item in text.split(",") if item.strip()]
        if kind == "cache_specs":
            return [item.strip() for item in text.split(";") if item.strip()]
        if kind == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        if kind == "headers":
            return [line.strip() for line in text.splitlines() if line.strip()]
        if kind == "proxy_headers":
            return _proxy_headers_value(option.name, text)
        default = option.default
        try:
            if kind == "size":
                return parse_size(text)
            if kind == "bool" or isinstance(default, bool):
                return parse_bool(text)
            if isinstance(default, int) or option.type in ("int | None", "int"):
                return int(text)
            if isinstance(default, float) or option.type == "float | None":
                return float(text)
        except ValueError:
            if kind == "size":
                expected = "a size in bytes such as 16M, 64K or 1048576"
            elif kind == "bool" or isinstance(default, bool):
                expected = "true or false"
            elif isinstance(default, float) or option.type == "float | None":
                expected = "a number"
            else:
                expected = "a whole number"
            raise OptionError(option.name, f"must be {expected}", text) from None
        return text

    def max_workers(self) -> int:
        """The most workers this configuration allows (also for SIGTTIN)."""
        return WORKERS_HARD_LIMIT if self.allow_many_workers else worker_cap()

    def validate(self) -> None:
        """Checks every option; raises `OptionError` naming the first bad one."""
        self._check_whole("workers", 1, self.max_workers(), self._workers_problem())
        self._check_whole("port", 0, 65535)
        if self.fd is not None:
            self._check_whole("fd", 0, 2**31 - 1)
        self._check_whole("backlog", 1, 2**31 - 1)
        for name in ("keep_alive_timeout", "header_timeout", "body_timeout", "send_timeout"):
            self._check_seconds(name, zero_allowed=False)
        self._check_seconds("graceful_timeout", zero_allowed=True)
        # 0 turns the body limit off, as nginx's client_max_body_size 0 does.
        self._check_whole("max_body_size", 0, MAX_SIZE)
        self._check_whole("max_spool_size", 0, MAX_SIZE)
        for name in ("max_request_line", "max_head_size", "max_connections", "max_worker_output"):
            self._check_whole(name, 1, MAX_SIZE)
        self._check_whole("max_headers", 1, MAX_HEADERS_LIMIT)
        self._check_whole("ws_max_size", 1, MAX_SIZE)
        self._check_whole("ws_max_queue", 1, 1024**2)
        for name in ("ws_ping_interval", "ws_ping_timeout"):
            self._check_seconds(name, zero_allowed=True)
        self._check_whole("threads", 0, MAX_THREADS)
        for name in ("host", "interface", "root_path", "lifespan", "static_cache", "log_level"):
            if not isinstance(getattr(self, name), str):
                raise OptionError(name, "must be a string", getattr(self, name))
        for name in ("access_log", "allow_many_workers", "ws_per_message_deflate"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, "must be true or false", getattr(self, name))
        host_port = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):\d{1,5}"
        if self.metrics is not None and not re.fullmatch(host_port, str(self.metrics)):
            raise OptionError("metrics", "takes HOST:PORT, e.g. 127.0.0.1:9100", self.metrics)
        self._check_tls()
        if self.uds is not None and (not isinstance(self.uds, str) or not self.uds):
            raise OptionError("uds", "must be a path", self.uds)
        if isinstance(self.static, str):
            raise OptionError("static", "must be a list of PREFIX=DIRECTORY strings", self.static)
        for mount in self.static or []:
            prefix, separator, directory = str(mount).partition("=")
            if not separator or not prefix.startswith("/") or not directory:
                raise OptionError("static", "takes PREFIX=DIRECTORY, e.g. /assets=./public", mount)
        if isinstance(self.cache, str):
            raise OptionError("cache", "must be a list of PATH:ttl=SECONDS,... strings", self.cache)
        from rush.cache import parse_cache_spec

        for spec in self.cache or []:
            try:
                parse_cache_spec(str(spec))
            except ValueError as error:
                raise OptionError("cache", str(error), spec) from None
        self._check_choice("interface", ("auto", "rush", "wsgi", "asgi"))
        self._check_choice("http", ("1", "2", "auto"))
        self._check_choice("lifespan", ("auto", "on", "off"))
        if self.root_path and (not self.root_path.startswith("/") or self.root_path.endswith("/")):
            raise OptionError("root_path", "must start with '/' and not end with it, e.g. /api", self.root_path)
        self._check_choice("static_cache", ("memory", "filesystem"))
        self._check_choice("log_level", ("critical", "error", "warning", "info", "debug"), self.log_level.lower())
        self._validate_lifecycle()
        self._check_proxy_headers_and_logs()

    def _validate_lifecycle(self) -> None:
        """The options of development and the workers' life (--reload, --timeout...)."""
        if self.timeout is not None:
            self._check_seconds("timeout", zero_allowed=True)
            if 0 < self.timeout < MIN_TIMEOUT:
                raise OptionError(
                    "timeout",
                    f"must be 0 (off) or at least {MIN_TIMEOUT} s (an idle loop comes back every second)",
                    self.timeout,
                )
        for name in ("max_requests", "max_requests_jitter"):
            self._check_whole(name, 0, MAX_SIZE)
        for name in ("reload", "factory", "preload", "http3"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, "must be true or false", getattr(self, name))
        if self.preload and self.reload:
            # --reload's new workers import the changed code; preloaded ones would only copy the old one.
            raise OptionError(
                "preload",
                "cannot be combined with --reload (workers forked from a preloaded app never see new code)",
                True,
            )
        for name in ("reload_dir", "reload_include", "reload_exclude"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, str) or not all(isinstance(item, str) for item in value)):
                raise OptionError(name, "must be a list of strings", value)
        if not isinstance(self.app_dir, str) or not self.app_dir:
            raise OptionError("app_dir", "must be a directory", self.app_dir)
        if isinstance(self.bind, str):
            self.bind = [self.bind]
        if self.bind is not None and not all(isinstance(item, str) for item in self.bind):
            raise OptionError("bind", "must be a list of addresses", self.bind)
        from rush.listeners import parse_bind

        for text in self.bind or []:
            parse_bind(text)
        for name in ("chdir", "env_file", "pid", "access_log_file", "error_log_file", "config"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise OptionError(name, "must be a non-empty string", value)
        if self.access_log_file is not None:
            self.access_log = True
        if isinstance(self.env, str):
            self.env = [self.env]
        for item in self.env or []:
            if not isinstance(item, str) or not re.fullmatch(r"[^=\s]+=.*", item, re.S):
                raise OptionError("env", "takes NAME=VALUE strings", item)
        if self.factory and self.app is not None and not isinstance(self.app, str):
            raise OptionError("factory", "needs the application as an import string, MODULE:FUNCTION", self.app)

    def effective_timeout(self) -> float:
        """``--timeout`` in seconds, 0 when off: 60 unless given, but off under
        ``--reload`` (a developer stopped at a breakpoint must not be killed)."""
        if self.timeout is None:
            return 0.0 if self.reload else DEFAULT_TIMEOUT
        return float(self.timeout)

    def check_paths(self) -> None:
        """What must exist before anything is bound or forked: each ``--static``
        directory, ``--app-dir``, ``--chdir``. Relative paths are read from the
        directory rush runs in (after ``--chdir``)."""
        for mount in self.static or []:
            directory = str(mount).partition("=")[2]
            if not os.path.isdir(directory):
                raise OptionError("static", f"names a directory that does not exist: {directory}", mount)
        if not os.path.isdir(self.app_dir):
            raise OptionError("app_dir", "must be an existing directory", self.app_dir)

    def _check_proxy_headers_and_logs(self) -> None:
        """The options of the proxy, response header and log format block."""
        self.proxy_headers = _proxy_headers_value("proxy_headers", self.proxy_headers)
        if not isinstance(self.forwarded_allow_ips, str):
            raise OptionError("forwarded_allow_ips", "must be a comma-separated string", self.forwarded_allow_ips)
        for entry in filter(None, (item.strip() for item in self.forwarded_allow_ips.split(","))):
            try:
                if entry != "*":
                    ipaddress.ip_network(entry.replace("[", "").replace("]", ""), strict=False)
            except ValueError:
                raise OptionError(
                    "forwarded_allow_ips", "takes IP addresses, CIDR networks or *", self.forwarded_allow_ips
                ) from None
        for name in ("forwarded_host", "server_header", "date_header"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, "must be true or false", getattr(self, name))
        if isinstance(self.header, str):
            raise OptionError("header", "must be a list of NAME:VALUE strings", self.header)
        for item in self.header or []:
            name, separator, value = str(item).partition(":")
            if not separator or not _HEADER_NAME.fullmatch(name.strip()) or not _HEADER_VALUE.fullmatch(value.strip()):
                raise OptionError("header", "takes NAME:VALUE with a valid header name and value", item)
        self._check_choice("log_format", ("text", "json"))
        if self.access_log_format is not None:
            from rush._rush import check_access_log_format

            try:
                check_access_log_format(self.access_log_format)
            except ValueError as error:
                raise OptionError("access_log_format", str(error), self.access_log_format) from None
        if self.log_config is not None and not os.path.isfile(self.log_config):
            raise OptionError("log_config", "must name a JSON or YAML file", self.log_config)

    def environment_pairs(self) -> list[tuple[str, str]]:
        """The ``--env`` settings as (name, value) pairs."""
        return [tuple(item.split("=", 1)) for item in self.env or []]  # type: ignore[misc]

    def header_pairs(self) -> list[tuple[str, str]]:
        """The ``--header`` options as (name, value) pairs."""
        pairs = [str(item).partition(":") for item in self.header or []]
        return [(name.strip(), value.strip()) for name, _, value in pairs]

    def _workers_problem(self) -> str:
        if self.allow_many_workers:
            return f"must be between 1 and {WORKERS_HARD_LIMIT}"
        return (
            f"must be between 1 and {worker_cap()} on this machine (4 per CPU, at least 32, at most 512); "
            "--allow-many-workers (RUSH_ALLOW_MANY_WORKERS=1) raises the limit to "
            f"{WORKERS_HARD_LIMIT}"
        )

    def _check_whole(self, name: str, low: int, high: int, problem: str | None = None) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(name, "must be a whole number", value)
        if not low <= value <= high:
            raise OptionError(name, problem or f"must be between {low} and {high}", value)

    def _check_seconds(self, name: str, zero_allowed: bool) -> None:
        value = getattr(self, name)
        if zero_allowed:
            problem = f"must be a finite number of seconds from 0 to {MAX_SECONDS}"
        else:
            problem = f"must be a finite number of seconds between 0 and {MAX_SECONDS}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OptionError(name, problem, value)
        # NaN fails every comparison, so it is refused too (as are the infinities).
        low_ok = 0 <= value if zero_allowed else 0 < value
        if not (low_ok and value <= MAX_SECONDS):
            raise OptionError(name, problem, value)

    def _check_choice(self, name: str, choices: tuple[str, ...], value: str | None = None) -> None:
        value = getattr(self, name) if value is None else value
        if value not in choices:
            listed = ", ".join(choices[:-1]) + " or " + choices[-1]
            raise OptionError(name, f"must be {listed}", getattr(self, name))

    def _check_tls(self) -> None:
        self._check_choice("ssl_cert_reqs", ("none", "optional", "required"))
        self._check_whole("ssl_max_handshakes", 1, 1_000_000)
        for name in ("ssl_certfile", "ssl_keyfile"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, [getattr(self, name)])
        if self.ssl_certfile and not self.ssl_keyfile:
            # Each certificate file holds its key too, as uvicorn's
            # load_cert_chain(certfile) reads it (the native loader takes the
            # certificates and the key of one PEM file apart).
            self.ssl_keyfile = list(self.ssl_certfile)
        if len(self.ssl_certfile or []) != len(self.ssl_keyfile or []):
            raise OptionError(
                "ssl_keyfile",
                "must be given once per --ssl-certfile, in the same order (or not at all, when each certificate "
                "file holds its key)",
                self.ssl_keyfile,
            )
        if self.ssl_keyfile_password is not None and not isinstance(self.ssl_keyfile_password, str):
            raise OptionError("ssl_keyfile_password", "must be a string", "***")
        if self.ssl_keyfile_password_file is not None and self.ssl_keyfile_password is not None:
            path = self.ssl_keyfile_password_file
            raise OptionError("ssl_keyfile_password_file", "cannot be given with --ssl-keyfile-password", path)
        binds = [self.bind] if isinstance(self.bind, str) else self.bind or []
        unix_binds = [text for text in binds if str(text).strip().startswith("unix:")]
        if self.ssl_certfile and (self.uds or unix_binds):
            raise OptionError("ssl_certfile", "applies to TCP listeners, not Unix sockets", self.ssl_certfile)
        if self.http3 is True and not self.ssl_certfile:
            raise OptionError("http3", "needs --ssl-certfile (QUIC is always encrypted)", True)

    def tls_settings(self) -> Any:
        """The native TLS settings (certificates loaded), or None without
        --ssl-certfile; raises OptionError naming the file at fault."""
        if not self.ssl_certfile or not self.ssl_keyfile:
            return None
        from rush import tls
        from rush._rush import TlsSettings

        if self.ssl_keyfile_password_file is not None:
            # Read once (by the supervisor, before it forks), then held as
            # --ssl-keyfile-password is: the file may be gone by the time a
            # worker is replaced.
            self.ssl_keyfile_password = tls.read_password_file(self.ssl_keyfile_password_file)
            self.ssl_keyfile_password_file = None
        try:
            keys = [tls.key_source(path, self.ssl_keyfile_password) for path in self.ssl_keyfile]
            settings = TlsSettings(
                list(self.ssl_certfile),
                keys,
                ca_certs=self.ssl_ca_certs,
                cert_reqs=self.ssl_cert_reqs,
                ciphers=self.ssl_ciphers,
                tickets=tls.ticket_keys,
            )
        except ValueError as error:
            raise TlsError(f"cannot serve HTTPS: {error}") from None
        # The keys are loaded (by the supervisor before it forks, then by each
        # worker): the password has no business in the app's environment.
        tls.forget_password_variable()
        return settings

    def cached_paths(self) -> list[tuple[str, Any]]:
        """The ``--cache`` paths and their `rush.Cache` policies."""
        from rush.cache import parse_cache_spec

        return [parse_cache_spec(spec) for spec in self.cache or []]

    def static_mounts(self) -> list[tuple[str, str]]:
        """The ``--static`` mounts as (prefix, directory) pairs."""
        return [tuple(mount.split("=", 1)) for mount in self.static or []]  # type: ignore[misc]

    def load_app(self) -> Any:
        """Imports the application (``"module:attribute"``, called with
        ``--factory``), or returns it as given; raises
        `rush.loading.AppLoadError`. With no app but ``--static`` mounts,
        an empty `rush.App` serves them."""
        if self.app is None and self.static:
            from rush.app import App

            return App()
        if not isinstance(self.app, str):
            return self.app
        from rush.loading import load_app

        return load_app(self.app, factory=self.factory, app_dir=self.app_dir)


def _file_origin(path: str, spelled: str) -> str:
    """How an error or --print-config names a value from the config file."""
    return f"{path}: {spelled}"


def _with_env_file(explicit: Mapping[str, Any], environment: Mapping[str, str]) -> Mapping[str, str]:
    """``--env-file`` (or ``RUSH_ENV_FILE``): the environment with the file's
    variables under the real ones. When the environment is the process's, the
    file's variables are also set there (unless already set), for the app."""
    path = explicit.get("env_file")
    variable = None
    if path is None:
        variable = ENVIRONMENT_PREFIX + "ENV_FILE"
        path = environment.get(variable)
    if path is None:
        return environment
    from rush.envfile import parse_env_file

    try:
        found = parse_env_file(path, environment)
    except (OSError, ValueError) as error:
        raise OptionError("env_file", f"cannot be read: {error}", path, variable) from None
    if environment is os.environ:
        for name, value in found.items():
            os.environ.setdefault(name, value)
    return {**found, **environment}
