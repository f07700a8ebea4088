"""No function takes more than six parameters besides its receiver, outside
a settings object: what a request needs travels as one value
(``IncomingRequest`` in src/dispatch/incoming.rs, ``FileAnswer``,
``MountRequest``, ``ParsedHead``...), not as a growing list of arguments
every layer passes on.

A settings object's constructor takes one keyword per option by design (the
Python side names each); those are listed in ``SETTINGS`` with where they
are, and the test fails on any other long signature, and on a listed one
that is gone (so the list only shrinks).

Rust signatures are read from the source text (a parenthesis-balanced scan
from ``fn name(``); Python's from the AST.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MOST = 6

# (file, function): why it keeps one parameter per setting.
SETTINGS: dict[tuple[str, str], str] = {
    ("src/server/settings.rs", "new"): "the settings objects' constructors: one keyword per flag",
    ("src/router.rs", "add_static"): "a static mount's settings, one keyword per option of App.static",
    ("python/rush/app.py", "static"): "App.static(): the public keyword options of a static mount",
}

_FN = re.compile(r"\bfn\s+(\w+)\s*(?:<[^(]*?>)?\s*\(")
_RECEIVER = re.compile(r"^\s*(?:&\s*(?:'\w+\s+)?)?(?:mut\s+)?self\b")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def rust_long_signatures(source: str) -> list[tuple[str, int]]:
    """(name, parameter count) of each function over ``MOST`` parameters."""
    found = []
    for match in _FN.finditer(source):
        depth, index = 1, match.end()
        while depth and index < len(source):
            depth += {"(": 1, ")": -1}.get(source[index], 0)
            index += 1
        # `->` would read as a closing angle bracket; it never sits inside a
        # parameter list except in a closure type, whose `>` we drop.
        parameters = _split_top_level(source[match.end() : index - 1].replace("->", "  "))
        parameters = [part for part in parameters if not _RECEIVER.match(part)]
        if len(parameters) > MOST:
            found.append((match.group(1), len(parameters)))
    return found


def python_long_signatures(source: str) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            names = [argument.arg for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            if len(names) > MOST:
                found.append((node.name, len(names)))
    return found


def long_signatures() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for root in ("src", "crates"):
        for path in sorted((REPO / root).rglob("*.rs")):
            relative = str(path.relative_to(REPO))
            for name, count in rust_long_signatures(path.read_text()):
                found[(relative, name)] = count
    for path in sorted((REPO / "python" / "rush").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        for name, count in python_long_signatures(path.read_text()):
            found[(relative, name)] = count
    return found


def test_no_function_over_six_parameters_outside_settings() -> None:
    found = long_signatures()
    unexplained = {where: count for where, count in found.items() if where not in SETTINGS}
    assert not unexplained, f"fold these parameters into one value: {unexplained}"
    gone = [where for where in SETTINGS if where not in found]
    assert not gone, f"no longer long, remove from SETTINGS: {gone}"


def test_the_checker_sees_a_long_signature() -> None:
    rust = """
        impl Core {
            fn short(&mut self, py: Python<'_>, a: u8) {}
            pub(crate) fn long<W: Writer>(&mut self, a: u8, b: &[u8], c: Option<(u8, u8)>,
                d: impl Fn(&u8) -> u8, e: u8, f: u8, g: u8) {}
        }
        fn free(a: u8, b: u8, c: u8, d: u8, e: u8, f: u8) {}
    """
    assert rust_long_signatures(rust) == [("long", 7)]
    python = "def f(self, a, b, c, d, e, f, *, g): pass\ndef g(a, b, c, d, e, f): pass\n"
    assert python_long_signatures(python) == [("f", 7)]
