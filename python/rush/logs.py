"""Logging for rush: ``rush.error`` (server events and tracebacks, to stderr)
and ``rush.access`` (one line per request, to stdout, off by default).

Lines carry the process id, so a multi-worker log says which worker spoke.
Applications may configure these loggers themselves; rush only adds its
handlers when the loggers have none.

``--log-format json`` writes each record as one JSON object per line
(`JsonFormatter`); access records then also carry the request's fields
(remote address, request line, status, size, duration) as keys, which the
native loop passes beside the line. ``--log-config FILE`` hands a
`logging.config.dictConfig` dictionary (JSON, or YAML when PyYAML is
installed) to the logging module instead: rush then adds no handlers and
sets no levels, and loggers the file leaves alone propagate to its root.
"""

from __future__ import annotations

import json
import logging
import logging.config
import logging.handlers
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rush.config import Config

error_logger = logging.getLogger("rush.error")
access_logger = logging.getLogger("rush.access")

# The access record's fields, in the order the native loop passes them.
ACCESS_FIELDS = ("remote_addr", "request_line", "status", "size", "duration_us")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, pid, message, and
    the access fields (or the traceback) when the record has them."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for name in ACCESS_FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def load_log_config(path: str) -> dict[str, Any]:
    """The dictConfig dictionary in ``path``: YAML for .yaml/.yml, else JSON."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise ValueError(f"--log-config {path}: YAML needs PyYAML (pip install pyyaml), or use JSON") from None
        loaded = yaml.safe_load(text)
    else:
        loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise ValueError(f"--log-config {path}: must hold a dictConfig dictionary")
    loaded.setdefault("version", 1)
    # Loggers configured before (rush's own) keep working unless the file says otherwise.
    loaded.setdefault("disable_existing_loggers", False)
    return loaded


def configure(
    level: str,
    log_format: str = "text",
    log_config: str | None = None,
    own_access_format: bool = False,
    files: tuple[str | None, str | None] = (None, None),
) -> None:
    """Sets up the two loggers. ``own_access_format``: the access lines are
    made by ``--access-log-format`` and printed as they are, with no prefix,
    as gunicorn prints its access log (unless ``--log-format json``).
    ``files``: the error log's and the access log's files
    (``--error-log-file``, ``--access-log-file``), None for stderr and
    stdout. A file is appended to by every process (the workers inherit the
    supervisor's handler) and reopened when it is moved away (logrotate):
    `logging.handlers.WatchedFileHandler`, which checks the path before
    each record, where gunicorn reopens its files on SIGUSR1."""
    if log_config is not None:
        # The file is in charge: loggers it leaves alone propagate to its root.
        logging.config.dictConfig(load_log_config(log_config))
        return
    if log_format == "json":
        formatter: logging.Formatter = JsonFormatter()
        access_formatter = formatter
    else:
        formatter = logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s")
        access_formatter = logging.Formatter("%(message)s") if own_access_format else formatter
    for logger, stream, path, chosen in (
        (error_logger, sys.stderr, files[0], formatter),
        (access_logger, sys.stdout, files[1], access_formatter),
    ):
        if not logger.handlers:
            handler: logging.Handler = (
                logging.StreamHandler(stream) if path is None else logging.handlers.WatchedFileHandler(path)
            )
            handler.setFormatter(chosen)
            logger.addHandler(handler)
        logger.propagate = False
    error_logger.setLevel(level.upper())
    access_logger.setLevel(logging.INFO)


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def configure_from(config: Config) -> None:
    """`configure` with the logging settings of ``config``: the supervisor
    and each worker set their loggers up the same way."""
    configure(
        config.log_level,
        config.log_format,
        config.log_config,
        config.access_log_format is not None,
        (config.error_log_file, config.access_log_file),
    )


def log_handler_error(message: str, exception: BaseException | None, level: str = "error") -> None:
    """Called by the native loop when a handler raises or something fails
    (``level`` "warning" for events that are not failures of the server,
    "debug" for connection events)."""
    exc_info = None if exception is None else (type(exception), exception, exception.__traceback__)
    error_logger.log(_LEVELS.get(level, logging.ERROR), message, exc_info=exc_info)


def log_access(line: str, fields: tuple[Any, ...] | None = None) -> None:
    if fields is None:
        access_logger.info(line)
    else:
        access_logger.info(line, extra=dict(zip(ACCESS_FIELDS, fields, strict=True)))
