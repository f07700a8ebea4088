"""No import circles: a file never depends, through other files, on a file
that depends on it (the layering of docs/architecture.md, checked).

For Rust, a module (a file) depends on another when its code names it
(``use crate::a::b``, ``crate::a::b::f()``, ``super::b``); a module's own
descendants are not dependencies of it (``mod x;`` and ``pub use x::Y``
declare, they do not call down), and neither are comments or a file's unit
tests. For Python, a module of ``python/rush`` depends on each module of the
package it imports, at any level (imports inside functions count: they are
circles deferred, not removed), except under ``if TYPE_CHECKING:``.

A strongly connected set of more than one module is a circle. There is
none today; should one have to stay for a while, it is listed in
``KNOWN_CIRCLES`` with the reason, and the test fails on any other, and on a
listed one that is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Circles that remain, each a sorted tuple of module names, with why they
# are still there. Remove an entry once its circle is gone.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def rust_dependencies(crate_src: Path, label: str) -> dict[str, set[str]]:
    modules: dict[tuple[str, ...], Path] = {}
    for path in crate_src.rglob("*.rs"):
        parts = list(path.relative_to(crate_src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        modules[tuple(parts)] = path

    def resolve(path: list[str]) -> tuple[str, ...] | None:
        for length in range(len(path), -1, -1):
            if tuple(path[:length]) in modules:
                return tuple(path[:length])
        return None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests \{.*", "", path.read_text(), flags=re.S)
        text = re.sub(r"//.*", "", text)
        targets: set[str] = set()
        for reference in re.findall(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
            segments = reference.split("::")
            if segments[0] == "crate":
                target = segments[1:]
            else:
                current = list(module)
                index = 0
                while index < len(segments) and segments[index] in ("super", "self"):
                    if segments[index] == "super":
                        current = current[:-1]
                    index += 1
                target = current + segments[index:]
            found = resolve(target)
            if found is None or found == module or found[: len(module)] == module:
                continue
            targets.add(f"{label}:{'::'.join(found) or 'lib'}")
        graph[f"{label}:{'::'.join(module) or 'lib'}"] = targets
    return graph


def python_dependencies(package: Path) -> dict[str, set[str]]:
    modules = {path.stem for path in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for statement in node.body
            for inner in ast.walk(statement)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rush":
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name.split(".")[1] for alias in node.names if alias.name.startswith("rush.")]
            targets.update(f"python:{name}" for name in names if name in modules and name != path.stem)
        graph[f"python:{path.stem}"] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_but_the_known_ones() -> None:
    graph = {
        **rust_dependencies(REPO / "src", "rush"),
        **rust_dependencies(REPO / "crates" / "rush-proto" / "src", "rush-proto"),
        **python_dependencies(REPO / "python" / "rush"),
    }
    found = circles(graph)
    new = found - set(KNOWN_CIRCLES)
    assert not new, f"import circles: {sorted(new)}"
    gone = set(KNOWN_CIRCLES) - found
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES: {sorted(gone)}"


def test_the_checker_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == {("a", "b", "c")}
