"""The vocabulary every option of rush shares, with nothing above it: how a
flag is named, how sizes and booleans are read, and the errors that say a
value is refused. config.py (the options themselves), listeners.py, tls.py
and cache.py all read it, so none of them needs config.py to import them
back (tests/test_import_circles.py).
"""

from __future__ import annotations

import re
import sys
from decimal import Decimal
from typing import Any

_SIZE_SUFFIXES = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmg]?)(?:i?b)?", re.IGNORECASE)


class TlsError(ValueError):
    """The certificate or key files cannot be used (one line for the operator)."""


class OptionError(ValueError):
    """An option's value is refused. The message is one line naming the
    flag (and the environment variable the value came from, if it did)."""

    def __init__(self, name: str, problem: str, value: Any, variable: str | None = None) -> None:
        self.name = name
        self.problem = problem
        self.value = value
        self.variable = variable
        where = flag_name(name) + (f" (from {variable})" if variable else "")
        super().__init__(f"{where} {problem} (got {_shown(value)})")

    def from_variable(self, variable: str) -> OptionError:
        """The same error, naming the environment variable that set the value."""
        return OptionError(self.name, self.problem, self.value, variable)


def _shown(value: Any) -> str:
    """A refused value as an error message quotes it: short, on one line."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + "..." + text[-10:]


def flag_name(name: str) -> str:
    """``"max_body_size"`` -> ``"--max-body-size"``."""
    return "--" + name.replace("_", "-")


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216; plain numbers are bytes. Suffixes K, M and G
    (also KB, KiB...) are powers of 1024. Raises ValueError for anything
    else, including negative numbers."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r}")
    number, suffix = match.groups()
    # Decimal, not float: exact, and no overflow however many digits.
    return int(Decimal(number) * _SIZE_SUFFIXES[suffix.lower()])


def format_size(size: int) -> str:
    """16777216 -> ``"16M"``: a size as the README and ``parse_size`` write
    it, in the largest unit that divides it exactly (plain bytes otherwise)."""
    for suffix, unit in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


# The exit status of a command line that was refused (argparse's too).
EXIT_USAGE = 2


def usage_error(message: str) -> int:
    """Reports a refused option value on one line; returns the exit status."""
    print(f"rush: error: {message}", file=sys.stderr)
    return EXIT_USAGE
