"""Loading the application from ``MODULE:ATTRIBUTE``, and saying clearly why not.

`load_app` imports the module (from ``--app-dir``, the working directory
by default), follows the attribute path, calls it with ``--factory``, and
refuses a likely factory called without the flag: a plain function that
takes no arguments is neither a WSGI app (two arguments) nor an ASGI app
(an ``async`` function of three), so serving it would only answer 500s.

Every failure is an `AppLoadError` whose message is one line saying what
went wrong (module not found, attribute not found, not callable, factory
needed, the module or the factory raised), and whose `details` hold the
traceback of the user's own code only: the frames of rush and of
importlib's machinery are left out, so the first frame shown is the
user's line that failed.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from typing import Any

# Frames from these directories are not the user's: rush's and importlib's.
_NOT_USERS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, importlib.__file__))


class AppLoadError(Exception):
    """The application could not be loaded: ``str(error)`` is one line,
    ``details`` the user's frames (possibly empty)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def _users_frame(frame: traceback.FrameSummary) -> bool:
    filename = frame.filename
    return not (filename.startswith("<frozen ") or os.path.abspath(filename).startswith(_NOT_USERS))


def _filter(summary: traceback.TracebackException) -> None:
    summary.stack = traceback.StackSummary.from_list([frame for frame in summary.stack if _users_frame(frame)])
    for chained in (summary.__cause__, summary.__context__):
        if chained is not None:
            _filter(chained)


def users_traceback(error: BaseException) -> str:
    """The traceback of ``error`` without rush's or importlib's frames."""
    summary = traceback.TracebackException.from_exception(error)
    _filter(summary)
    return "".join(summary.format()).rstrip("\n")


def _one_line(error: BaseException) -> str:
    # str() of a SyntaxError names its file and line, which the last line of
    # format_exception_only leaves out.
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _a(value: Any) -> str:
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def looks_like_a_factory(value: Any) -> bool:
    """A plain (not async) function or method every parameter of which has a
    default (or that has none): not WSGI, not ASGI; most likely ``create_app``."""
    if not (inspect.isfunction(value) or inspect.ismethod(value)) or inspect.iscoroutinefunction(value):
        return False
    try:
        parameters = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        parameter.default is not parameter.empty or parameter.kind in (parameter.VAR_KEYWORD,)
        for parameter in parameters
    )


def import_module(module_name: str, app_dir: str = ".") -> Any:
    directory = os.path.abspath(app_dir)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        return importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - whatever the module raises is reported as its own
        # Only the app's own module (or a package above it) missing is "not
        # found"; a module missing inside the app's imports is the app's error.
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        if missing is not None and (module_name == missing or module_name.startswith(missing + ".")):
            raise AppLoadError(
                f"module {module_name!r} not found (looked in {directory} and sys.path; --app-dir sets the first)"
            ) from None
        message = f"importing module {module_name!r} failed: {_one_line(error)}"
        raise AppLoadError(message, users_traceback(error)) from None


def load_app(target: str, *, factory: bool = False, app_dir: str = ".") -> Any:
    """Imports ``"module:attribute"`` and returns the application (the
    factory's result with ``factory``); raises `AppLoadError`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AppLoadError(f"the application {target!r} must be given as MODULE:ATTRIBUTE, e.g. main:app")
    value: Any = import_module(module_name, app_dir)
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if factory:
        if not callable(value):
            raise AppLoadError(f"--factory: {target!r} is {_a(value)}, not a function to call")
        try:
            value = value()
        except Exception as error:  # noqa: BLE001 - whatever the factory raises is reported as its own
            raise AppLoadError(
                f"calling the factory {target!r} failed: {_one_line(error)}", users_traceback(error)
            ) from None
        if inspect.isawaitable(value):
            raise AppLoadError(f"--factory: {target!r} is async; the factory must return the application itself")
    elif looks_like_a_factory(value):
        raise AppLoadError(
            f"{target!r} is a function that takes no arguments: not a WSGI or ASGI app, but likely an "
            "application factory; pass --factory to call it and serve what it returns"
        )
    from rush.app import App

    if not callable(value) and not isinstance(value, App):
        what = f"--factory: {target!r} returned" if factory else f"{target!r} is"
        raise AppLoadError(f"{what} {_a(value)}, not an application (a rush App, a WSGI or an ASGI callable)")
    return value
