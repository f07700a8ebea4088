"""Logging for rush: ``rush.error`` (server events and tracebacks, to stderr)
and ``rush.access`` (one line per request, to stdout, off by default).

Lines carry the process id, so a multi-worker log says which worker spoke.
Applications may configure these loggers themselves; rush only adds its
handlers when the loggers have none.
"""

from __future__ import annotations

import logging
import sys

error_logger = logging.getLogger("rush.error")
access_logger = logging.getLogger("rush.access")


def configure(level: str) -> None:
    formatter = logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s")
    for logger, stream in ((error_logger, sys.stderr), (access_logger, sys.stdout)):
        if not logger.handlers:
            handler = logging.StreamHandler(stream)
            handler.setFormatter(formatter)
            logger.addHandler(handler)
        logger.propagate = False
    error_logger.setLevel(level.upper())
    access_logger.setLevel(logging.INFO)


def log_handler_error(message: str, exception: BaseException | None, level: str = "error") -> None:
    """Called by the native loop when a handler raises or something fails
    (``level`` "warning" for events that are not failures of the server)."""
    log = error_logger.warning if level == "warning" else error_logger.error
    if exception is None:
        log(message)
    else:
        log(message, exc_info=(type(exception), exception, exception.__traceback__))


def log_access(line: str) -> None:
    access_logger.info(line)
