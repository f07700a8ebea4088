"""`rush.Config`: every option of the server, in one place.

Each option is a dataclass field whose metadata carries its help text. The
CLI's flags are generated from these fields, every flag also reads the
environment variable ``RUSH_<FLAG>`` (``--max-body-size`` ->
``RUSH_MAX_BODY_SIZE``), and `rush.run` takes the same names as keyword
arguments. Precedence: keyword or flag, then environment, then default.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

ENVIRONMENT_PREFIX = "RUSH_"

_SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216; plain numbers are bytes."""
    text = text.strip().lower().removesuffix("b").removesuffix("i")
    if text and text[-1] in _SIZE_SUFFIXES:
        return int(float(text[:-1]) * _SIZE_SUFFIXES[text[-1]])
    return int(text)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _option(default: Any, help: str, *, kind: str = "", metavar: str | None = None) -> Any:
    return field(default=default, metadata={"help": help, "kind": kind, "metavar": metavar})


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
    workers: int = _option(1, "worker processes (each runs one event loop on one core)")
    backlog: int = _option(2048, "listen() backlog: connections the kernel queues before accepting")
    keep_alive_timeout: float = _option(5.0, "seconds an idle keep-alive connection stays open")
    header_timeout: float = _option(10.0, "seconds a client has to send a complete request head")
    body_timeout: float = _option(30.0, "seconds of silence allowed while a request body arrives")
    send_timeout: float = _option(30.0, "seconds of no write progress before a client is dropped")
    graceful_timeout: float = _option(30.0, "seconds in-flight requests get to finish on shutdown or reload")
    max_body_size: int = _option(
        16 * 1024**2, "largest request body in bytes (413 beyond); suffixes K, M, G", kind="size"
    )
    max_connections: int = _option(10000, "open connections per worker; beyond it, accepting pauses")
    max_request_line: int = _option(8192, "longest request line in bytes (414 beyond)", kind="size")
    max_head_size: int = _option(16384, "largest request head in bytes (431 beyond)", kind="size")
    max_headers: int = _option(100, "most header fields per request (431 beyond)")
    interface: str = _option("auto", "how to call the app: auto, rush (rush.App), wsgi or asgi")
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
    access_log: bool = _option(False, "log one line per request to stdout", kind="bool")
    log_level: str = _option("info", "error, warning, info or debug")

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field[Any]]:
        return [option for option in fields(cls) if option.name != "app"]

    @classmethod
    def from_sources(
        cls,
        explicit: Mapping[str, Any],
        environment: Mapping[str, str] | None = None,
    ) -> Config:
        """Builds a Config from explicit values (flags or keywords; ``None``
        means not given), then ``RUSH_*`` environment variables, then defaults."""
        environment = os.environ if environment is None else environment
        values: dict[str, Any] = {}
        known = {option.name: option for option in fields(cls)}
        unknown = set(explicit) - set(known)
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        for name, option in known.items():
            value = explicit.get(name)
            if value is None:
                text = environment.get(ENVIRONMENT_PREFIX + name.upper())
                if text is not None:
                    value = cls.convert(option, text)
            if value is not None:
                values[name] = value
        config = cls(**values)
        config.validate()
        return config

    @staticmethod
    def convert(option: dataclasses.Field[Any], text: str) -> Any:
        """Converts a string (from the environment or a flag) to the option's type."""
        kind = option.metadata.get("kind")
        if kind == "mounts":
            return [item.strip() for item in text.split(",") if item.strip()]
        if kind == "size":
            return parse_size(text)
        if kind == "bool":
            return parse_bool(text)
        default = option.default
        if isinstance(default, bool):
            return parse_bool(text)
        if isinstance(default, int) or option.type in ("int | None", "int"):
            return int(text)
        if isinstance(default, float):
            return float(text)
        return text

    def validate(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be between 0 and 65535")
        for name in ("max_body_size", "max_request_line", "max_head_size", "max_headers", "max_connections"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for mount in self.static or []:
            prefix, separator, directory = mount.partition("=")
            if not separator or not prefix.startswith("/") or not directory:
                raise ValueError(f"--static takes PREFIX=DIRECTORY, e.g. /assets=./public (got {mount!r})")
        if self.interface not in ("auto", "rush", "wsgi", "asgi"):
            raise ValueError("interface must be auto, rush, wsgi or asgi")
        if self.lifespan not in ("auto", "on", "off"):
            raise ValueError("lifespan must be auto, on or off")
        if self.threads < 0:
            raise ValueError("threads must be 0 or more")
        if self.root_path and (not self.root_path.startswith("/") or self.root_path.endswith("/")):
            raise ValueError("root_path must start with '/' and not end with it, e.g. /api")
        if self.static_cache not in ("memory", "filesystem"):
            raise ValueError("static_cache must be 'memory' or 'filesystem'")
        if self.log_level.lower() not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError(f"unknown log level {self.log_level!r}")

    def static_mounts(self) -> list[tuple[str, str]]:
        """The ``--static`` mounts as (prefix, directory) pairs."""
        return [tuple(mount.split("=", 1)) for mount in self.static or []]  # type: ignore[misc]

    def load_app(self) -> Any:
        """Imports the application (``"module:attribute"``), or returns it as given.
        With no app but ``--static`` mounts, an empty `rush.App` serves them."""
        if self.app is None and self.static:
            from rush.app import App

            return App()
        if not isinstance(self.app, str):
            return self.app
        module_name, _, attribute = self.app.partition(":")
        if not module_name or not attribute:
            raise ImportError(f"application {self.app!r} must be given as MODULE:ATTRIBUTE")
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
        value: Any = module
        for part in attribute.split("."):
            try:
                value = getattr(value, part)
            except AttributeError:
                raise ImportError(f"module {module_name!r} has no attribute {attribute!r}") from None
        return value
