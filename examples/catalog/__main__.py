"""``python -m examples.catalog build|serve``: fill a database with the catalog, or serve it.

* ``build [--db URL] [--seed N] [--packages N] [--force]``: creates the tables
  (schema.sql) in an empty database and fills them from the seeded generator;
  for SQLite (the default, examples/catalog/catalog.sqlite3) ``--force``
  replaces an existing file, otherwise an existing file is left as it is.
* ``serve [--db URL] [--host H] [--port P] [--workers N] [--front rush|flask|fastapi]
  [--no-cache]``: runs rush with the chosen front end (the rush App by default,
  the Flask twin through rush's WSGI, or the FastAPI app through its ASGI),
  passing the database in ``CATALOG_DB``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from examples.catalog.data import DEFAULT_PACKAGES, DEFAULT_SEED, build
from examples.catalog.db import parse_url

FRONTS = {
    "rush": ["examples.catalog.rush_app:app"],
    "flask": ["examples.catalog.flask_app:app", "--interface", "wsgi"],
    "fastapi": ["examples.catalog.fastapi_app:app", "--interface", "asgi"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.catalog", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="create and fill the database")
    build_parser.add_argument("--db", help="database URL (default: examples/catalog/catalog.sqlite3)")
    build_parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    build_parser.add_argument("--packages", type=int, default=DEFAULT_PACKAGES)
    build_parser.add_argument("--force", action="store_true", help="SQLite: replace an existing file")
    serve_parser = commands.add_parser("serve", help="serve /nas/ with rush")
    serve_parser.add_argument("--db", help="database URL (default: examples/catalog/catalog.sqlite3)")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", default="8000")
    serve_parser.add_argument("--workers", default="1")
    serve_parser.add_argument("--front", choices=sorted(FRONTS), default="rush")
    serve_parser.add_argument("--no-cache", action="store_true", help="CATALOG_CACHE=0: every request queries")
    arguments = parser.parse_args(argv)

    target = parse_url(arguments.db)
    if arguments.command == "build":
        if target.dialect == "sqlite":
            path = Path(target.path)
            if path.exists() and not arguments.force:
                print(f"{path} exists (--force rebuilds it)")
                return 0
            path.unlink(missing_ok=True)
        counts = build(target.url, arguments.seed, arguments.packages)
        print(f"built {target.url}: " + ", ".join(f"{count} {table}" for table, count in counts.items()))
        return 0

    environment = dict(os.environ, CATALOG_DB=target.url, CATALOG_CACHE="0" if arguments.no_cache else "1")
    rush = Path(sys.executable).with_name("rush")
    command = [str(rush), *FRONTS[arguments.front], "--host", arguments.host, "--port", arguments.port]
    command += ["--workers", arguments.workers]
    print(f"serving {target.url} with the {arguments.front} front end: http://{arguments.host}:{arguments.port}/nas/")
    os.execve(command[0], command, environment)
    return 1  # not reached: execve replaces this process


if __name__ == "__main__":
    sys.exit(main())
