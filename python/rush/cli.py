"""The ``rush`` command: ``rush MODULE:ATTRIBUTE [options]``, or
``rush proxy [options]`` for the forward proxy (`rush.proxy`).

Flags are generated from `rush.Config`, so the CLI, the environment
variables (``RUSH_<FLAG>``) and `rush.run` keywords always agree. A value
that `Config` refuses (from a flag or a variable) is reported on one line,
``rush: error: --workers must be ...``, with exit status 2, before anything
is bound or forked.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rush.config import ENVIRONMENT_PREFIX, Config, OptionError, TlsError
from rush.config_file import ConfigFileError
from rush.main import serve
from rush.values import format_size, usage_error

# The exit status of a usage error, as argparse uses.


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rush",
        description="rush: a fast HTTP server for Python apps, with a native (Rust) core.",
        epilog=(
            "Every option can also be set through an environment variable named "
            f"{ENVIRONMENT_PREFIX}<OPTION> (e.g. {ENVIRONMENT_PREFIX}WORKERS=4); flags win. "
            "Signals: TERM/INT drain and stop, QUIT stops at once, HUP replaces workers "
            "one by one, TTIN/TTOU add or remove a worker."
        ),
        # Defaults are written into each option's help text (argparse's own
        # default display would show None, the "not given" marker).
    )
    parser.add_argument("app", nargs="?", help="the application, as MODULE:ATTRIBUTE (env RUSH_APP)")
    for option in Config.option_fields():
        flags = ["--" + option.name.replace("_", "-")]
        if option.metadata.get("short"):
            flags.insert(0, option.metadata["short"])
        environment = ENVIRONMENT_PREFIX + option.name.upper()
        # argparse %-formats help texts: a literal % (the access log's atoms) is doubled.
        help_text = f"{option.metadata['help']} (env {environment})".replace("%", "%%")
        if option.name == "workers":
            help_text = f"{option.metadata['help']} (env {environment}, or WEB_CONCURRENCY)"
        if option.metadata.get("kind") == "bool":
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        if option.metadata.get("kind") == "proxy_headers":
            # --proxy-headers alone (x-forwarded), --proxy-headers FAMILY, or --no-proxy-headers.
            parser.add_argument(
                *flags, nargs="?", const="x-forwarded", default=None, metavar=option.metadata["metavar"], help=help_text
            )
            parser.add_argument(
                "--no-" + flags[-1][2:], dest=option.name, action="store_const", const="off", help=f"{flags[-1]} off"
            )
            continue
        if option.metadata.get("kind") in ("mounts", "cache_specs", "list", "headers"):
            metavar = option.metadata["metavar"] or option.name.upper()
            parser.add_argument(*flags, action="append", default=None, metavar=metavar, help=help_text)
            continue
        if option.default is not None and "[default:" not in help_text:
            default = option.default
            if option.metadata.get("kind") == "size":
                default = format_size(default)
            help_text = f"{help_text} [default: {default}]"
        parser.add_argument(
            *flags,
            default=None,
            metavar=option.metadata.get("metavar") or option.name.upper(),
            help=help_text,
        )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print every setting as TOML, merged from the command line, --config, RUSH_* variables and "
        "defaults, each with where it came from, and exit",
    )
    return parser


# Values --print-config does not show.
SECRET_OPTIONS = frozenset({"ssl_keyfile_password"})


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    # JSON's string escapes are all TOML basic-string escapes too.
    return json.dumps(str(value), ensure_ascii=False)


def render_settings(config: Config) -> str:
    """The merged settings as a TOML document (a rush.toml rush would read the
    same way), each line commented with where its value came from."""
    origins = config.sources.origins
    lines = ["# rush's settings: command line, then --config, then RUSH_* variables, then defaults"]
    for option in Config.settable_fields():
        value = getattr(config, option.name)
        where = origins.get(option.name, "default")
        if option.name in SECRET_OPTIONS and value is not None:
            value = "***"
        if option.name == "env" and value:
            # raw_env often carries credentials: the names say enough.
            value = [f"{str(item).partition('=')[0]}=***" for item in value]
        if value is None:
            lines.append(f"# {option.name} is not set  # {where}")
        else:
            lines.append(f"{option.name} = {_toml_value(value)}  # {where}")
    for name, hook in config.sources.hooks.items():
        if isinstance(hook, str):
            lines.append(f"{name} = {_toml_value(hook)}  # file {config.config}")
        else:
            lines.append(f"# {name} is the function {getattr(hook, '__qualname__', hook)} of {config.config}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["proxy"]:
        from rush.proxy import main as proxy_main

        return proxy_main(argv[1:])
    parser = build_parser()
    arguments = vars(parser.parse_args(argv))
    if arguments.pop("version"):
        from rush._rush import __version__

        print(f"rush {__version__}")
        return 0
    printing = arguments.pop("print_config")
    family = arguments.get("proxy_headers")
    if arguments["app"] is None and isinstance(family, str) and ":" in family:
        # `rush --proxy-headers MODULE:APP`: the optional FAMILY took the app.
        arguments["app"], arguments["proxy_headers"] = family, "x-forwarded"
    explicit = {}
    known = {option.name: option for option in Config.option_fields()}
    for name, value in arguments.items():
        if value is None or name == "app":
            continue
        try:
            explicit[name] = Config.convert(known[name], value) if isinstance(value, str) else value
        except OptionError as error:
            return usage_error(str(error))
    explicit["app"] = arguments["app"]
    try:
        config = Config.from_sources(explicit)
    except (TypeError, ValueError) as error:
        return usage_error(str(error))
    if printing:
        for warning in config.sources.warnings:
            print(f"rush: warning: {warning}", file=sys.stderr)
        print(render_settings(config))
        return 0
    if config.app is None and not config.static:
        parser.error("no application given (rush MODULE:ATTRIBUTE, or --static PREFIX=DIR to serve files)")
    try:
        return serve(config)
    except (TlsError, OptionError, ConfigFileError) as error:
        return usage_error(str(error))
    except OSError as error:
        print(f"rush: cannot listen: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
