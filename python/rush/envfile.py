"""``--env-file``: environment variables from a ``KEY=VALUE`` file, as
Docker, Heroku-style ``.env`` files and python-dotenv write them.

The syntax read: one ``KEY=VALUE`` per line; blank lines and lines starting
with ``#`` are skipped; an optional ``export`` before the key; a value in
single quotes is taken as written, one in double quotes understands
``\\n``, ``\\t``, ``\\"`` and ``\\\\``; an unquoted value ends at `` #`` (a
comment) and is stripped. No ``${VARIABLE}`` expansion, no multi-line
values: a line that is not ``KEY=VALUE`` is an error naming its number.
Variables already in the environment win over the file's, as with
python-dotenv, so a deployment can override what the file says.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _value(text: str) -> str | None:
    if text[:1] == "'":
        return text[1:-1] if len(text) > 1 and text.endswith("'") else None
    if text[:1] == '"':
        if len(text) < 2 or not text.endswith('"'):
            return None
        return re.sub(r"\\(.)", lambda match: _ESCAPES.get(match.group(1), match.group(0)), text[1:-1])
    return re.split(r"\s+#", text, maxsplit=1)[0].strip()


def parse_env_file(path: str) -> dict[str, str]:
    """The variables the file sets; raises OSError if it cannot be read and
    ValueError (naming the line) for a line that is not ``KEY=VALUE``."""
    variables: dict[str, str] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            match = _LINE.fullmatch(line.rstrip("\r\n"))
            value = _value(match.group(2)) if match else None
            if match is None or value is None:
                raise ValueError(f"{path}, line {number}: not KEY=VALUE")
            variables[match.group(1)] = value
    return variables
