"""python/rush/_rush.pyi against the compiled module rush._rush: the stub,
parsed with ast, must declare every public attribute of the module and of each
of its classes (and nothing that does not exist), with the right kind
(property or attribute vs. method, static/class methods), a constructor
exactly where the class has one, and the parameters the native functions
really take (names, order, positional vs. keyword-only, which have defaults).
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import rush._rush as native
from support import REPO

STUB = REPO / "python" / "rush" / "_rush.pyi"

# Dunder methods that are part of a type's public behaviour (a stub must
# declare them for a type checker to allow the operation).
PROTOCOL_DUNDERS = {
    "__call__",
    "__iter__",
    "__next__",
    "__await__",
    "__aiter__",
    "__anext__",
    "__len__",
    "__getitem__",
    "__setitem__",
    "__contains__",
    "__enter__",
    "__exit__",
    "__aenter__",
    "__aexit__",
}


@dataclass
class StubMember:
    kind: str  # "property", "attribute", "method", "staticmethod", "classmethod"
    node: ast.AST | None = None


@dataclass
class StubClass:
    members: dict[str, StubMember] = field(default_factory=dict)


def _decorator_names(function: ast.FunctionDef) -> set[str]:
    names = set()
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Name):
            names.add(decorator.id)
        elif isinstance(decorator, ast.Attribute):
            names.add(decorator.attr)
    return names


def _parse_stub() -> tuple[dict[str, str], dict[str, StubClass]]:
    """Top-level names (name -> kind) and classes of the stub."""
    tree = ast.parse(STUB.read_text(), filename=str(STUB))
    names: dict[str, str] = {}
    classes: dict[str, StubClass] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
            stub_class = StubClass()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    decorators = _decorator_names(item)
                    if "setter" in decorators or "deleter" in decorators:
                        continue
                    if "property" in decorators:
                        kind = "property"
                    elif "staticmethod" in decorators:
                        kind = "staticmethod"
                    elif "classmethod" in decorators:
                        kind = "classmethod"
                    else:
                        kind = "method"
                    stub_class.members[item.name] = StubMember(kind, item)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    stub_class.members[item.target.id] = StubMember("attribute", item)
            classes[node.name] = stub_class
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = "function"
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = "attribute"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = "attribute"
    return names, classes


STUB_NAMES, STUB_CLASSES = _parse_stub()


def _is_public(name: str) -> bool:
    return not name.startswith("_")


def runtime_module_names() -> set[str]:
    return {name for name in dir(native) if _is_public(name)} | {"__version__"}


def runtime_classes() -> dict[str, type]:
    return {name: value for name, value in vars(native).items() if _is_public(name) and isinstance(value, type)}


def runtime_members(cls: type) -> dict[str, str]:
    """Public members defined by the class itself (name -> kind)."""
    members = {}
    for name, value in vars(cls).items():
        if not (_is_public(name) or name in PROTOCOL_DUNDERS):
            continue
        if isinstance(value, staticmethod):
            members[name] = "staticmethod"
        elif isinstance(value, classmethod | types.ClassMethodDescriptorType):
            members[name] = "classmethod"
        elif isinstance(value, types.GetSetDescriptorType | types.MemberDescriptorType | property):
            members[name] = "property"
        else:
            members[name] = "method"
    return members


ALL_CLASSES = sorted(set(runtime_classes()) | set(STUB_CLASSES))


def test_stub_declares_exactly_the_public_module_attributes() -> None:
    declared = set(STUB_NAMES)
    present = runtime_module_names()
    assert sorted(present - declared) == [], "public attributes of rush._rush missing from the stub"
    assert sorted(declared - present) == [], "names in the stub that rush._rush does not have"


def test_stub_declares_classes_as_classes() -> None:
    for name, value in vars(native).items():
        if name in STUB_NAMES and isinstance(value, type):
            assert STUB_NAMES[name] == "class", f"{name} is a class but the stub declares a {STUB_NAMES[name]}"


@pytest.mark.parametrize("class_name", ALL_CLASSES)
def test_stub_declares_every_public_member_of_the_class(class_name: str) -> None:
    cls = runtime_classes().get(class_name)
    stub = STUB_CLASSES.get(class_name)
    assert cls is not None, f"the stub declares class {class_name}, which rush._rush does not have"
    assert stub is not None, f"class {class_name} is missing from the stub"
    present = runtime_members(cls)
    declared = {name: member for name, member in stub.members.items() if name not in ("__init__", "__new__")}
    missing = sorted(set(present) - set(declared))
    extra = sorted(set(declared) - set(present))
    assert missing == [], f"{class_name}: members missing from the stub"
    assert extra == [], f"{class_name}: the stub declares members the class does not have"
    for name, kind in present.items():
        stub_kind = declared[name].kind
        if kind == "property":
            assert stub_kind in ("property", "attribute"), (
                f"{class_name}.{name} is a property, the stub says {stub_kind}"
            )
        else:
            assert stub_kind == kind, f"{class_name}.{name} is a {kind}, the stub says {stub_kind}"


@pytest.mark.parametrize("class_name", sorted(set(runtime_classes()) & set(STUB_CLASSES)))
def test_stub_declares_a_constructor_exactly_where_there_is_one(class_name: str) -> None:
    cls = runtime_classes()[class_name]
    constructible = "__new__" in vars(cls)
    declared = {"__init__", "__new__"} & set(STUB_CLASSES[class_name].members)
    if constructible:
        assert declared, f"{class_name}() can be constructed but the stub declares no __init__"
    else:
        assert not declared, f"the stub declares a constructor for {class_name}, which cannot be constructed"
        with pytest.raises(TypeError):
            cls()


# ---------------------------------------------------------------------------
# Signatures


def _stub_parameters(function: ast.FunctionDef, drop_first: bool) -> list[tuple[str, str, bool]]:
    """(name, kind, has_default) for each parameter of a stub function."""
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [False] * (len(positional) - len(arguments.defaults)) + [True] * len(arguments.defaults)
    result = []
    for index, argument in enumerate(positional):
        kind = "positional-only" if index < len(arguments.posonlyargs) else "positional"
        result.append((argument.arg, kind, defaults[index]))
    if arguments.vararg:
        result.append((arguments.vararg.arg, "var-positional", False))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        result.append((argument.arg, "keyword-only", default is not None))
    if arguments.kwarg:
        result.append((arguments.kwarg.arg, "var-keyword", False))
    return result[1:] if drop_first else result


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "var-positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword-only",
    inspect.Parameter.VAR_KEYWORD: "var-keyword",
}


def _runtime_parameters(signature: inspect.Signature) -> list[tuple[str, str, bool]]:
    return [
        (parameter.name, _KINDS[parameter.kind], parameter.default is not inspect.Parameter.empty)
        for parameter in signature.parameters.values()
    ]


def _normalise(parameters: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    # Native signatures do not mark positional-only parameters the way stubs
    # may (with /): compare them as ordinary positional parameters.
    return [(name, "positional" if kind == "positional-only" else kind, default) for name, kind, default in parameters]


def _signature_cases() -> list[tuple[str, str]]:
    cases = []
    for class_name in sorted(set(runtime_classes()) & set(STUB_CLASSES)):
        cls = runtime_classes()[class_name]
        for name, member in STUB_CLASSES[class_name].members.items():
            if member.kind in ("method", "staticmethod", "classmethod") and (name in vars(cls) or name == "__init__"):
                cases.append((class_name, name))
    return cases


@pytest.mark.parametrize(("class_name", "method"), _signature_cases())
def test_stub_signatures_match_the_native_ones(class_name: str, method: str) -> None:
    cls = runtime_classes()[class_name]
    stub_function = STUB_CLASSES[class_name].members[method].node
    assert isinstance(stub_function, ast.FunctionDef)
    target = cls if method == "__init__" else vars(cls)[method]
    if isinstance(target, staticmethod | classmethod):
        target = getattr(cls, method)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        pytest.skip(f"{class_name}.{method} exposes no signature")
    drop_first = STUB_CLASSES[class_name].members[method].kind in ("method", "classmethod")
    runtime = _runtime_parameters(signature)
    if runtime and runtime[0][0] in ("self", "$self", "cls", "$cls", "type", "$type") and method != "__init__":
        runtime = runtime[1:]
    assert _normalise(_stub_parameters(stub_function, drop_first)) == _normalise(runtime), (
        f"{class_name}.{method}: stub {ast.unparse(stub_function.args)} vs native {signature}"
    )


def test_stub_parses_and_the_module_is_private() -> None:
    assert Path(native.__file__).name.startswith("_rush.")
    assert STUB_NAMES, "the stub declares nothing"
    # The public package re-exports the classes users need.
    import rush

    assert rush.Request is native.Request
    assert rush.Response is native.Response


# The settings classes a Server is built from (src/server/settings.rs,
# src/proxy/settings.rs) take no default but None (absent): every default
# lives in rush.config.Config (or ProxyConfig). TlsSettings predates them.
SETTINGS_CLASSES = sorted(name for name in runtime_classes() if name.endswith("Settings") and name != "TlsSettings")


@pytest.mark.parametrize("class_name", SETTINGS_CLASSES)
def test_settings_classes_take_no_default_but_none(class_name: str) -> None:
    signature = inspect.signature(runtime_classes()[class_name])
    defaults = {
        parameter.name: parameter.default
        for parameter in signature.parameters.values()
        if parameter.default is not inspect.Parameter.empty
    }
    assert all(default is None for default in defaults.values()), f"{class_name}: defaults {defaults}"


def test_every_settings_class_is_checked() -> None:
    assert SETTINGS_CLASSES == [
        "AppServerSettings",
        "AppSettings",
        "ForwardingSettings",
        "HeaderSettings",
        "Http3Settings",
        "LimitSettings",
        "LogSettings",
        "ProxyAccessSettings",
        "ProxyLimitSettings",
        "ProxySettings",
        "ProxyTimeoutSettings",
        "TimeoutSettings",
        "WebSocketSettings",
    ]
