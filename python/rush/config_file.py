"""``-c FILE`` / ``--config FILE`` (``RUSH_CONFIG``): rush's settings read
from a file, in one of two forms.

* **A Python file in gunicorn's form** (``gunicorn.conf.py``): executed as
  gunicorn executes it (as a module named ``__config__``, its directory not
  put on ``sys.path``), then its module-level names are read. gunicorn's
  setting names are translated by `GUNICORN_SETTINGS`, one row per gunicorn
  setting: `Mapped` (rush has the setting, maybe under another name or with a
  converted value), `Fixed` (rush always behaves one way: the values that
  match it are accepted, others warned about) or `Missing` (rush has no such
  setting, and why). rush's own option names are read too (``max_body_size``).
  The server hooks (``on_starting``, ``post_fork``...) are read as functions;
  `HOOKS` says which of gunicorn's rush calls. Upper-case names, names that
  start with ``_``, modules, functions that are not hooks and objects that
  are not plain data (``from os import environ``) are the file's own
  business and skipped, as gunicorn skips them; any other name (a number,
  a string, a list...) is warned about, so a typo (``worker = 4``) is
  never silently ignored.
* **A TOML file** (``rush.toml``, or ``pyproject.toml``'s ``[tool.rush]``
  table) with rush's option names (``max-body-size`` or ``max_body_size``)
  and hooks as ``"module:function"`` strings.

Reading a file only collects values: `Config.from_sources` (config.py)
converts and checks them like flags, between the command line and the
environment. Every warning is collected in `FileSettings.warnings` and
logged once rush's logging is set up; a value that is refused is an
`OptionError` naming the file and the setting as the file spells it
(``--keep-alive-timeout (from gunicorn.conf.py: keepalive) must be ...``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import tomllib
import traceback
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any


class ConfigFileError(ValueError):
    """The file cannot be read or executed (one message naming it)."""


class Unsupported(Exception):
    """Raised by a converter: rush cannot do what this value asks (the message says why)."""


@dataclass(frozen=True)
class Mapped:
    """A gunicorn setting rush has: ``rush`` is its name in rush; ``convert``
    turns gunicorn's value into rush's options (by default ``{rush: value}``)."""

    rush: str
    convert: Callable[[Any], dict[str, Any]] | None = None

    def options(self, value: Any) -> dict[str, Any]:
        return self.convert(value) if self.convert is not None else {self.rush: value}


@dataclass(frozen=True)
class Fixed:
    """A gunicorn setting for something rush always does one way (or does
    not do at all): ``accepted`` values ask for what rush does anyway (often
    gunicorn's default, which example configs spell out); any other gets a
    warning."""

    accepted: tuple[Any, ...]
    why: str


@dataclass(frozen=True)
class Missing:
    """A gunicorn setting rush does not have, and why (or what to use instead)."""

    why: str


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else value


def _worker_class(value: Any) -> dict[str, Any]:
    # rush detects WSGI, ASGI and rush.App by itself and runs them all on its
    # own loop: these classes ask for nothing more.
    known = (
        "sync",
        "gthread",
        "asgi",
        "gunicorn.workers.sync.SyncWorker",
        "gunicorn.workers.gthread.ThreadWorker",
        "gunicorn.workers.gasgi.ASGIWorker",
        "uvicorn.workers.UvicornWorker",
        "uvicorn.workers.UvicornH11Worker",
        "uvicorn_worker.UvicornWorker",
        "uvicorn_worker.UvicornH11Worker",
    )
    if value in known:
        return {}
    raise Unsupported(
        "rush runs every app on its own event loop and has no other worker classes (gevent, eventlet, tornado); "
        "a blocking WSGI app can use threads (--threads)"
    )


def _threads(value: Any) -> dict[str, Any]:
    # gunicorn's 1 is its plain sync worker: rush's 0, the app on the loop.
    if isinstance(value, int) and not isinstance(value, bool) and value <= 1:
        return {"threads": 0}
    return {"threads": value}


def _request_line(value: Any) -> dict[str, Any]:
    # gunicorn documents 0 as no limit; its own parser then allows 1 MiB.
    return {"max_request_line": 1024 * 1024 if value == 0 else value}


def _access_log(value: Any) -> dict[str, Any]:
    if value == "-":
        return {"access_log": True}
    return {"access_log": True, "access_log_file": value}


def _error_log(value: Any) -> dict[str, Any]:
    return {} if value == "-" else {"error_log_file": value}


def _allow_ips(name: str) -> Callable[[Any], dict[str, Any]]:
    def convert(value: Any) -> dict[str, Any]:
        return {name: ",".join(map(str, value)) if isinstance(value, list | tuple) else value}

    return convert


def _cert_reqs(value: Any) -> dict[str, Any]:
    # gunicorn takes ssl.CERT_NONE/OPTIONAL/REQUIRED (0, 1, 2).
    names = {0: "none", 1: "optional", 2: "required"}
    if isinstance(value, int) and not isinstance(value, bool) and int(value) in names:
        return {"ssl_cert_reqs": names[int(value)]}
    return {"ssl_cert_reqs": value}


def _http_protocols(value: Any) -> dict[str, Any]:
    # gunicorn still answers HTTP/1.1 to a client that does not pick h2: rush's auto.
    protocols = {item.strip() for item in str(value).split(",") if item.strip()}
    if protocols == {"h1"}:
        return {"http": "1"}
    if protocols and protocols <= {"h1", "h2"}:
        return {"http": "auto"}
    return {"http": value}


def _python_path(value: Any) -> dict[str, Any]:
    paths = [item for item in str(value).split(",") if item]
    if len(paths) > 1:
        raise Unsupported("rush puts one directory on sys.path (--app-dir); add the others in the app")
    return {"app_dir": paths[0]} if paths else {}


def _bind(value: Any) -> dict[str, Any]:
    return {"bind": _as_list(value)}


def _raw_env(value: Any) -> dict[str, Any]:
    return {"env": _as_list(value)}


def _proxy_protocol(value: Any) -> dict[str, Any]:
    """gunicorn's ``off``/``v1``/``v2``/``auto`` (or a boolean, as older
    gunicorn wrote it): rush reads v1 and v2 alike once it is on, so any
    version asks for it on; ``off`` (or False) for it off."""
    if isinstance(value, bool):
        return {"proxy_protocol": value}
    text = str(value).strip().lower()
    if text not in ("off", "v1", "v2", "auto"):
        # Passed on as given: the option's own check names the file.
        return {"proxy_protocol": value}
    return {"proxy_protocol": text != "off"}


def _loglevel(value: Any) -> dict[str, Any]:
    return {"log_level": value.lower() if isinstance(value, str) else value}


_STRICT_PARSER = "rush's HTTP/1.1 parser is strict and has no switch for this"
_NO_USER_SWITCH = (
    "rush does not change its user, group or umask; set them where it is started (systemd User=, Group=, UMask=)"
)
_NO_DIRTY = "rush has no dirty arbiters"
_HTTP2_FIXED = "rush's HTTP/2 limits are built in (see README, HTTP/2)"
_NO_STATSD = "rush serves Prometheus metrics instead (--metrics HOST:PORT)"

# Every gunicorn setting (gunicorn 23 to 27), by gunicorn's name. tests/test_config_file.py
# checks that the installed gunicorn has none missing here.
GUNICORN_SETTINGS: dict[str, Mapped | Fixed | Missing] = {
    "config": Missing("a config file cannot name another one"),
    "wsgi_app": Mapped("app"),
    "bind": Mapped("bind", _bind),
    "backlog": Mapped("backlog"),
    "workers": Mapped("workers"),
    "worker_class": Mapped("interface", _worker_class),
    "threads": Mapped("threads", _threads),
    "worker_connections": Mapped("max_connections"),
    "max_requests": Mapped("max_requests"),
    "max_requests_jitter": Mapped("max_requests_jitter"),
    "timeout": Mapped("timeout"),
    "graceful_timeout": Mapped("graceful_timeout"),
    "keepalive": Mapped("keep_alive_timeout"),
    "limit_request_line": Mapped("max_request_line", _request_line),
    "limit_request_fields": Mapped("max_headers"),
    "limit_request_field_size": Missing("rush bounds the whole request head instead (--max-head-size, 16K)"),
    "reload": Mapped("reload"),
    "reload_engine": Fixed(("auto", "inotify"), "rush's --reload always watches with inotify"),
    "reload_extra_files": Fixed(([],), "rush watches --reload-dir for --reload-include patterns"),
    "spew": Fixed((False,), "rush has no tracing of every line run"),
    "check_config": Fixed((False,), "use --print-config"),
    "print_config": Fixed((False,), "pass --print-config on the command line"),
    "preload_app": Mapped("preload"),
    "sendfile": Fixed((True,), "rush has no switch for sendfile"),
    "reuse_port": Fixed((True,), "rush always binds one SO_REUSEPORT socket per worker for a TCP address"),
    "chdir": Mapped("chdir"),
    "daemon": Fixed((False,), "rush does not daemonize itself; run it under systemd, a container or supervisord"),
    "raw_env": Mapped("env", _raw_env),
    "pidfile": Mapped("pid"),
    "worker_tmp_dir": Missing("rush's workers beat a shared memory page, not a temporary file"),
    "user": Missing(_NO_USER_SWITCH),
    "group": Missing(_NO_USER_SWITCH),
    "umask": Fixed((0,), _NO_USER_SWITCH),
    "initgroups": Fixed((False,), _NO_USER_SWITCH),
    "tmp_upload_dir": Missing("rush spools request bodies to the system's temporary directory (TMPDIR)"),
    "secure_scheme_headers": Missing(
        "rush reads X-Forwarded-Proto (or Forwarded proto=, --proxy-headers forwarded) from --forwarded-allow-ips peers"
    ),
    "forwarded_allow_ips": Mapped("forwarded_allow_ips", _allow_ips("forwarded_allow_ips")),
    "accesslog": Mapped("access_log_file", _access_log),
    "disable_redirect_access_to_syslog": Fixed((False,), "rush does not log to syslog"),
    "access_log_format": Mapped("access_log_format"),
    "errorlog": Mapped("error_log_file", _error_log),
    "loglevel": Mapped("log_level", _loglevel),
    "capture_output": Fixed((False,), "rush does not redirect the app's stdout and stderr"),
    "logger_class": Fixed(("gunicorn.glogging.Logger", "simple"), "rush has one logger class; use --log-config"),
    "logconfig": Missing("rush reads a dictConfig file (JSON or YAML) with --log-config, not a fileConfig one"),
    "logconfig_dict": Missing("write the dictionary to a JSON file and pass it with --log-config"),
    "logconfig_json": Mapped("log_config"),
    "syslog_addr": Missing("rush does not log to syslog"),
    "syslog": Fixed((False,), "rush does not log to syslog"),
    "syslog_prefix": Missing("rush does not log to syslog"),
    "syslog_facility": Missing("rush does not log to syslog"),
    "enable_stdio_inheritance": Fixed((False, True), "rush does not daemonize, so stdio is always inherited"),
    "statsd_host": Missing(_NO_STATSD),
    "dogstatsd_tags": Fixed(("",), _NO_STATSD),
    "statsd_prefix": Fixed(("",), _NO_STATSD),
    "enable_backlog_metric": Fixed((False,), _NO_STATSD),
    "proc_name": Missing("rush does not rename its processes"),
    "default_proc_name": Missing("rush does not rename its processes"),
    "pythonpath": Mapped("app_dir", _python_path),
    "paste": Missing("rush does not load PasteDeploy files"),
    "raw_paste_global_conf": Fixed(([],), "rush does not load PasteDeploy files"),
    "proxy_protocol": Mapped("proxy_protocol", _proxy_protocol),
    "proxy_allow_ips": Mapped("forwarded_allow_ips", _allow_ips("forwarded_allow_ips")),
    "protocol": Fixed(("http",), "rush speaks HTTP, not uwsgi"),
    "uwsgi_allow_ips": Missing("rush speaks HTTP, not uwsgi"),
    "keyfile": Mapped("ssl_keyfile"),
    "certfile": Mapped("ssl_certfile"),
    "ssl_version": Missing("rush's TLS (rustls) speaks TLS 1.2 and 1.3 only"),
    "cert_reqs": Mapped("ssl_cert_reqs", _cert_reqs),
    "ca_certs": Mapped("ssl_ca_certs"),
    "suppress_ragged_eofs": Missing("rush's TLS (rustls) has no such switch"),
    "do_handshake_on_connect": Missing("rush's TLS (rustls) has no such switch"),
    "ciphers": Missing("OpenSSL cipher strings do not name rustls suites: give --ssl-ciphers rustls names"),
    "http_protocols": Mapped("http", _http_protocols),
    "http2_cleartext": Missing("rush takes HTTP/2 prior knowledge on a cleartext port whenever --http allows HTTP/2"),
    "http2_max_concurrent_streams": Missing(_HTTP2_FIXED),
    "http2_initial_window_size": Missing(_HTTP2_FIXED),
    "http2_max_frame_size": Missing(_HTTP2_FIXED),
    "http2_max_header_list_size": Missing(_HTTP2_FIXED),
    "permit_obsolete_folding": Fixed((False,), _STRICT_PARSER),
    "strip_header_spaces": Fixed((False,), _STRICT_PARSER),
    "permit_unconventional_http_method": Fixed((False,), _STRICT_PARSER),
    "permit_unconventional_http_version": Fixed((False,), _STRICT_PARSER),
    "casefold_http_method": Fixed((False,), _STRICT_PARSER),
    "forwarder_headers": Missing(_STRICT_PARSER),
    "header_map": Missing(_STRICT_PARSER),
    "asgi_loop": Fixed(("auto",), "rush picks uvloop when it is installed"),
    "asgi_lifespan": Mapped("lifespan"),
    "asgi_disconnect_grace_period": Missing("rush has no such grace period to set"),
    "websocket_max_message_size": Mapped("ws_max_size"),
    "http_parser": Fixed(("auto",), "rush has one HTTP parser, its own"),
    "root_path": Mapped("root_path"),
    "dirty_apps": Fixed(([],), _NO_DIRTY),
    "dirty_workers": Fixed((0,), _NO_DIRTY),
    "dirty_timeout": Missing(_NO_DIRTY),
    "dirty_threads": Missing(_NO_DIRTY),
    "dirty_graceful_timeout": Missing(_NO_DIRTY),
    "control_socket": Missing("rush has no control socket; it takes signals (HUP, TTIN, TTOU...)"),
    "control_socket_mode": Missing("rush has no control socket"),
    "control_socket_disable": Fixed((True,), "rush has no control socket"),
}

# gunicorn's server hooks: None where rush calls the hook at the same moment
# (rush/hooks.py), else why it never calls it.
HOOKS: dict[str, str | None] = {
    "on_starting": None,
    "on_reload": None,
    "when_ready": None,
    "pre_fork": None,
    "post_fork": None,
    "post_worker_init": None,
    "worker_int": None,
    "worker_abort": None,
    "pre_exec": "rush never re-executes itself (it has no USR2 binary upgrade)",
    "pre_request": "rush calls no Python per request outside the app; use WSGI or ASGI middleware",
    "post_request": "rush calls no Python per request outside the app; use WSGI or ASGI middleware",
    "child_exit": None,
    "worker_exit": None,
    "nworkers_changed": None,
    "on_exit": None,
    "ssl_context": "rush's TLS is rustls, not an ssl.SSLContext",
    "on_dirty_starting": _NO_DIRTY,
    "dirty_post_fork": _NO_DIRTY,
    "dirty_worker_init": _NO_DIRTY,
    "dirty_worker_exit": _NO_DIRTY,
}


@dataclass
class FileSettings:
    """What a config file says: rush option -> (value, the name the file used),
    the hooks rush calls, and the warnings to log."""

    path: str
    values: dict[str, tuple[Any, str]] = field(default_factory=dict)
    hooks: dict[str, Callable[..., Any] | str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def warn(self, name: str, message: str) -> None:
        self.warnings.append(f"{self.path}: {name}: {message}")

    def set(self, option: str, value: Any, spelled: str) -> None:
        previous = self.values.get(option)
        if previous is not None and previous[1] != spelled and previous[0] != value:
            self.warn(
                spelled,
                f"sets rush's {option} as {previous[1]} did, to another value; rush keeps {previous[1]}'s",
            )
            return
        self.values[option] = (value, spelled)


def load(path: str, options: Collection[str]) -> FileSettings:
    """Reads the file at ``path`` (``.toml`` as TOML, anything else as a
    Python file in gunicorn's form); ``options`` are rush's option names.
    Raises `ConfigFileError` if it cannot be read or names a hook that is
    not a function."""
    if not os.path.isfile(path):
        raise ConfigFileError(f"config file {path} does not exist")
    if path.endswith(".toml"):
        return _load_toml(path, options)
    return _load_python(path, options)


def _load_python(path: str, options: Collection[str]) -> FileSettings:
    namespace = _execute(path)
    settings = FileSettings(path)
    for name, value in namespace.items():
        if name.startswith("_") or not name.islower() or isinstance(value, types.ModuleType):
            continue
        if name in HOOKS:
            _add_hook(settings, name, value)
        elif value is None and (name in GUNICORN_SETTINGS or name in options):
            continue  # gunicorn's "not set"
        elif name in GUNICORN_SETTINGS:
            _add_gunicorn_setting(settings, name, value, options)
        elif name in options and name != "config":
            settings.set(name, value, name)
        elif inspect.isfunction(value) or inspect.isclass(value) or callable(value):
            near = difflib.get_close_matches(name, list(HOOKS), n=1, cutoff=0.8)
            if near:
                settings.warn(name, f"is not a hook rush knows (did you mean {near[0]}?); never called")
        elif isinstance(value, str | bytes | int | float | list | tuple | dict | set):
            settings.warn(name, "is not a setting of gunicorn or rush; ignored")
        # Anything else was made or imported for the file's own use (from os import environ).
    return settings


def _execute(path: str) -> dict[str, Any]:
    """Runs the file as gunicorn does (a module named ``__config__``); returns its names."""
    module_name = "__config__"
    try:
        loader = importlib.machinery.SourceFileLoader(module_name, path)
        spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - whatever the file raises is reported, naming it
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path]
        where = f", line {lines[-1]}" if lines else ""
        if isinstance(error, SyntaxError) and error.lineno:
            where = f", line {error.lineno}"
        summary = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]
        raise ConfigFileError(f"config file {path}{where} failed: {summary}") from None
    return vars(module)


def _add_hook(settings: FileSettings, name: str, value: Any) -> None:
    """A hook the file names: a function, or (TOML) a "module:function" string
    imported when the supervisor starts (`import_hook`), from --app-dir as the app is."""
    if not callable(value) and not isinstance(value, str):
        raise ConfigFileError(f"{settings.path}: {name} must be a function (a server hook), not {value!r}")
    why = HOOKS[name]
    if why is not None:
        settings.warn(name, f"rush never calls this hook: {why}")
        return
    settings.hooks[name] = value


def _add_gunicorn_setting(settings: FileSettings, name: str, value: Any, options: Collection[str]) -> None:
    row = GUNICORN_SETTINGS[name]
    if isinstance(row, Missing):
        settings.warn(name, f"ignored, rush has no such setting: {row.why}")
        return
    if isinstance(row, Fixed):
        if value not in row.accepted:
            settings.warn(name, f"not applied: {row.why}")
        return
    try:
        converted = row.options(value)
    except Unsupported as why:
        settings.warn(name, f"not applied: {why}")
        return
    for option, option_value in converted.items():
        if option not in options:
            # A setting another part of rush adds (--preload, --proxy-protocol) that this build lacks.
            settings.warn(name, f"this rush has no --{option.replace('_', '-')}; ignored")
            continue
        settings.set(option, option_value, name)


def _load_toml(path: str, options: Collection[str]) -> FileSettings:
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigFileError(f"config file {path} cannot be read: {error}") from None
    table = document
    if os.path.basename(path) == "pyproject.toml":
        table = document.get("tool", {}).get("rush")
        if not isinstance(table, dict):
            raise ConfigFileError(f"config file {path} has no [tool.rush] table")
    settings = FileSettings(path)
    for key, value in table.items():
        name = key.replace("-", "_")
        if name in HOOKS:
            if not isinstance(value, str) or ":" not in value:
                raise ConfigFileError(f'{path}: {key} must be a hook as a "module:function" string, not {value!r}')
            _add_hook(settings, name, value)
        elif name in options and name != "config":
            settings.set(name, value, key)
        elif name in GUNICORN_SETTINGS and isinstance(GUNICORN_SETTINGS[name], Mapped):
            rush_name = GUNICORN_SETTINGS[name].rush  # type: ignore[union-attr]
            settings.warn(key, f"is gunicorn's name; a TOML file takes rush's ({rush_name.replace('_', '-')}); ignored")
        else:
            near = difflib.get_close_matches(name, list(options), n=1, cutoff=0.8)
            hint = f" (did you mean {near[0].replace('_', '-')}?)" if near else ""
            settings.warn(key, f"is not a setting of rush{hint}; ignored")
    return settings


def import_hook(path: str, name: str, target: str, app_dir: str) -> Callable[..., Any]:
    """The function a TOML file names for hook ``name`` (``"module:function"``);
    ``module`` is looked for in ``app_dir`` first, as the app's module is."""
    module_name, _, attribute = target.partition(":")
    directory = os.path.abspath(app_dir)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as error:  # noqa: BLE001 - a hook that cannot be found stops rush, naming it
        problem = f"{type(error).__name__}: {error}"
        raise ConfigFileError(f"{path}: {name} = {target!r} cannot be imported: {problem}") from None
    return found
