"""``--env-file``: environment variables from a ``KEY=VALUE`` file, as
Docker, Heroku-style ``.env`` files and python-dotenv write them.

The syntax read: one ``KEY=VALUE`` per line; blank lines and lines starting
with ``#`` are skipped; an optional ``export`` before the key; a value in
single quotes understands ``\\'`` and ``\\\\``, one in double quotes
``\\n``, ``\\t``, ``\\r``, ``\\"``, ``\\'``, ``\\\\`` and the other C escapes
(``\\a \\b \\f \\v``); a quoted value may be followed by a comment; an
unquoted value ends at `` #`` (a comment) and is stripped. No multi-line
values: a line that is not ``KEY=VALUE`` is an error naming its number.

Expansion, as python-dotenv's ``load_dotenv`` does it: ``${NAME}`` and
``${NAME:-DEFAULT}`` in a value (quoted or not) are replaced by ``NAME``'s
value from the environment, else from an earlier line of the file, else by
``DEFAULT`` (itself not expanded), else by nothing. A variable set but empty
is used as it is: the default applies only to one not set at all, unlike
the shell's ``:-``. ``$NAME`` without braces stays as written.

Variables already in the environment win over the file's, as with
python-dotenv, so a deployment can override what the file says.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping

_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*")
# A quoted value: the quote, escaped characters or anything but the quote, the
# same quote, then maybe a comment.
_QUOTED = re.compile(r"""(['"])((?:\\.|(?!\1)[^\\])*)\1(?:\s+#.*|\s*)""")
_DOUBLE_QUOTED_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    '"': '"',
    "'": "'",
    "\\": "\\",
}
_SINGLE_QUOTED_ESCAPES = {"'": "'", "\\": "\\"}
_REFERENCE = re.compile(r"\$\{([^}:]*)(?::-([^}]*))?\}")


def _value(text: str) -> str | None:
    """The value after ``=``, unquoted and unescaped; None if it is not one."""
    if text[:1] not in ("'", '"'):
        return re.split(r"\s+#", text, maxsplit=1)[0].strip()
    quoted = _QUOTED.fullmatch(text)
    if quoted is None:
        return None
    escapes = _DOUBLE_QUOTED_ESCAPES if quoted.group(1) == '"' else _SINGLE_QUOTED_ESCAPES
    return re.sub(r"\\(.)", lambda match: escapes.get(match.group(1), match.group(0)), quoted.group(2))


def expand(value: str, known: Mapping[str, str]) -> str:
    """``value`` with every ``${NAME}`` and ``${NAME:-DEFAULT}`` replaced from ``known``."""
    return _REFERENCE.sub(lambda match: known.get(match.group(1), match.group(2) or ""), value)


def parse_env_file(path: str, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables the file sets, their ``${...}`` expanded from
    ``environment`` first, then from the file's earlier lines; raises OSError
    if it cannot be read and ValueError (naming the line) for a line that is
    not ``KEY=VALUE``."""
    variables: dict[str, str] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            match = _LINE.fullmatch(line.rstrip("\r\n"))
            value = _value(match.group(2)) if match else None
            if match is None or value is None:
                raise ValueError(f"{path}, line {number}: not KEY=VALUE")
            variables[match.group(1)] = expand(value, ChainMap({} if environment is None else environment, variables))
    return variables
