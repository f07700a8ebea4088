"""The package catalog of seed 004 (examples/catalog/) over real sockets, on real databases.

* The ``/nas/`` contract against the rush App on SQLite, PostgreSQL and MariaDB
  (each a real throwaway server from Debian's packages, one per session; a
  database whose packages are missing is skipped with the reason): 400 and 422,
  ``88f6281``/``88f6282``, ``major`` from the firmware table, the beta channel,
  the three shapes, POST forms, absolute URLs from the Host. The packages of
  each answer are checked against an independent Python reading of the
  generated rows, so the SQL is tested on every engine, not only compared with
  itself.
* The cache: a hit calls neither the handler nor the database (the example's
  query counter says so), the Host is part of the key, unnamed parameters are
  not, invalidation after a change of the data, and ``CATALOG_CACHE=0``.
* The twins: the Flask app (under rush's WSGI) and the FastAPI app (under
  rush's ASGI) answer the same bytes as the rush App on every database, and the
  Flask twin with Flask-Caching reproduces spkrepo's Host bug.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import GUARD_TIMEOUT, REPO, RushServer, ServerFactory, clean_environment

# `python -m pytest` puts the repository root on sys.path, the `pytest` script does not.
sys.path.insert(0, str(REPO))

from examples.catalog import data, dbservers
from examples.catalog.catalog import ARCH_FROM_SYNO

RUSH_APP = "examples.catalog.rush_app:app"
FLASK_APP = "examples.catalog.flask_app:app"
FASTAPI_APP = "examples.catalog.fastapi_app:app"
DATABASES = ("sqlite", "postgresql", "mariadb")

# Parameter sets covering the three shapes, translations, the beta channel, a Synology arch alias
# and a noarch-only architecture.
SAMPLES: tuple[dict[str, str], ...] = (
    {"arch": "x86_64", "build": "42661", "language": "enu"},
    {"arch": "apollolake", "build": "64570", "language": "ger", "major": "7"},
    {"arch": "armada38x", "build": "24922", "language": "fre", "package_update_channel": "beta"},
    {"arch": "88f6281", "build": "25556", "language": "jpn", "major": "6", "micro": "2", "minor": "2"},
    {"arch": "x86", "build": "4458", "language": "enu"},
    {"arch": "noarch", "build": "15047", "language": "chs"},
    {"arch": "rtd1296", "build": "7321", "language": "spn", "package_update_channel": "beta"},
)


# ---------------------------------------------------------------------------
# Databases: one per kind per session


@pytest.fixture(scope="session")
def tables() -> data.Tables:
    return data.generate()


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("catalog-sqlite") / "catalog.sqlite3"
    data.build(str(path))
    return f"sqlite:///{path}"


def server_database(kind: str) -> Iterator[str]:
    reason = dbservers.unavailable(kind)
    if reason:
        pytest.skip(reason)
    server = dbservers.start(kind)
    try:
        data.build(server.url)
        yield server.url
    finally:
        server.stop()
        assert server.process.poll() is not None, f"{kind} (pid {server.pid}) still running after stop()"
        assert not server.directory.exists()


@pytest.fixture(scope="session")
def postgresql_url() -> Iterator[str]:
    yield from server_database("postgresql")


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    yield from server_database("mariadb")


@pytest.fixture(scope="module", params=DATABASES)
def database_url(request: pytest.FixtureRequest) -> str:
    kind = request.param
    return request.getfixturevalue("sqlite_url" if kind == "sqlite" else f"{kind}_url")


def start(
    factory: ServerFactory,
    app: str,
    url: str,
    *args: str,
    cache: bool = True,
    admin: bool = True,
    asynchronous: bool | None = None,
) -> RushServer:
    """Starts ``app`` on ``url``; ``asynchronous`` sets CATALOG_ASYNC (None: the example's default)."""
    settings = {"CATALOG_DB": url, "CATALOG_CACHE": "1" if cache else "0", "CATALOG_ADMIN": "1" if admin else "0"}
    if asynchronous is not None:
        settings["CATALOG_ASYNC"] = "1" if asynchronous else "0"
    return factory(app, *args, env=clean_environment(settings))


@pytest.fixture(scope="module")
def rush_app(module_servers: ServerFactory, database_url: str) -> RushServer:
    return start(module_servers, RUSH_APP, database_url)


@pytest.fixture
def client(rush_app: RushServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rush_app.url, timeout=GUARD_TIMEOUT) as client:
        yield client


def nas(client: httpx.Client, params: dict[str, str], **options: Any) -> httpx.Response:
    return client.get("/nas/", params=params, **options)


def packages(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = response.json()
    return document if isinstance(document, list) else document["packages"]


def queries(client: httpx.Client) -> int:
    return int(client.get("/_catalog/stats").json()["queries"])


# ---------------------------------------------------------------------------
# An independent reading of the generated rows: which build each package should get.


def expected_builds(tables: data.Tables, arch: str, build: int, major: int, beta: bool) -> list[tuple[str, str, str]]:
    """(package, version, md5) of the builds the contract selects, computed from the generator's
    rows in plain Python (md5 identifies a build: it is the digest of its path)."""
    rows = tables.rows
    firmware = {row[0]: row for row in rows["firmware"]}
    arch_ids = {code: id_ for id_, code in rows["architecture"]}
    wanted = {arch_ids[ARCH_FROM_SYNO.get(arch, arch)]: False, arch_ids["noarch"]: True}
    versions = {row[0]: row for row in rows["version"]}
    names = dict(rows["package"])
    build_arches: dict[int, list[int]] = {}
    for build_id, arch_id in rows["build_architecture"]:
        build_arches.setdefault(build_id, []).append(arch_id)
    eligible = []
    for build_id, version_id, fmin_id, fmax_id, _path, _log, md5, _size, active in rows["build"]:
        version = versions[version_id]
        fmin, fmax = firmware[fmin_id], firmware.get(fmax_id)
        for arch_id in build_arches[build_id]:
            if arch_id not in wanted or not active or fmin[2] > build or (fmax and fmax[2] < build):
                continue
            if version[4] and not beta:
                continue
            if not (fmin[1].startswith(f"{major}.") or (wanted[arch_id] and major < 6 and fmin[1].startswith("3."))):
                continue
            eligible.append((version[1], version[2], fmin[2], build_id, version, md5))
    newest_version: dict[int, int] = {}
    for package_id, revision, *_ in eligible:
        newest_version[package_id] = max(newest_version.get(package_id, revision), revision)
    newest_firmware: dict[int, int] = {}
    for package_id, revision, fmin_build, *_ in eligible:
        if revision == newest_version[package_id]:
            newest_firmware[package_id] = max(newest_firmware.get(package_id, fmin_build), fmin_build)
    chosen = {
        (names[package_id], build_id, f"{version[3]}-{revision}", md5)
        for package_id, revision, fmin_build, build_id, version, md5 in eligible
        if revision == newest_version[package_id] and fmin_build == newest_firmware[package_id]
    }
    return [(name, version, md5) for name, _, version, md5 in sorted(chosen)]


def summary(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(entry["package"], entry["version"], entry["md5"]) for entry in entries]


# ---------------------------------------------------------------------------
# The contract


@pytest.mark.parametrize("missing", ["build", "arch", "language"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_missing_parameter_is_400(client: httpx.Client, missing: str, method: str) -> None:
    values = {"arch": "x86_64", "build": "42661", "language": "enu"}
    del values[missing]
    if method == "GET":
        response = client.get("/nas/", params=values)
    else:
        response = client.post("/nas/", data=values)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "change",
    [
        {"language": "xyz"},
        {"arch": "m68k"},
        {"arch": "X86_64"},
        {"build": "abc"},
        {"build": "42661.0"},
        {"build": ""},
        {"build": "99999999999999999999"},
        {"major": "seven"},
    ],
)
def test_invalid_values_are_422(client: httpx.Client, change: dict[str, str]) -> None:
    values = {"arch": "x86_64", "build": "42661", "language": "enu", **change}
    assert nas(client, values).status_code == 422


@pytest.mark.parametrize("build", ["100", "4000"])
def test_below_every_firmware_the_answer_is_an_empty_list(client: httpx.Client, build: str) -> None:
    """spkrepo's reference answer: it compares only Firmware.build <= build,
    so a build below every DSM firmware gets 200 and the legacy list shape,
    with nothing in it."""
    answer = nas(client, {"arch": "x86_64", "build": build, "language": "enu"})
    assert answer.status_code == 200 and answer.json() == []


def test_the_answer_has_the_packages_the_rows_say(client: httpx.Client, tables: data.Tables) -> None:
    for values in SAMPLES:
        build = int(values["build"])
        major = int(values.get("major", 0)) or {4458: 5, 7321: 6, 15047: 6, 24922: 6, 42661: 7}[build]
        beta = values.get("package_update_channel") == "beta" and build < 40000
        expected = expected_builds(tables, values["arch"], build, major, beta)
        got = summary(packages(nas(client, values)))
        assert got == expected, values
    # Not vacuous: the common architectures list many packages.
    assert len(summary(packages(nas(client, SAMPLES[0])))) > 50


def test_three_shapes(client: httpx.Client) -> None:
    base = {"arch": "x86_64", "language": "enu"}
    old = nas(client, {**base, "build": "4458"}).json()
    assert isinstance(old, list) and old
    for build, major, keys in (("5003", "5", None), ("5004", "5", {"packages", "keyrings"})):
        document = nas(client, {**base, "build": build, "major": major}).json()
        assert isinstance(document, list) if keys is None else set(document) == keys, build
    dsm6 = nas(client, {**base, "build": "39999", "major": "6"}).json()
    assert set(dsm6) == {"packages", "keyrings"} and dsm6["keyrings"] == [] and dsm6["packages"]
    dsm7 = nas(client, {**base, "build": "40000", "major": "7"}).json()
    assert set(dsm7) == {"packages"}


def test_synology_names_of_88f628x(client: httpx.Client) -> None:
    bodies = {arch: nas(client, {**SAMPLES[3], "arch": arch}).content for arch in ("88f6281", "88f6282", "88f628x")}
    assert len(set(bodies.values())) == 1
    entries = packages(nas(client, {**SAMPLES[3], "arch": "88f6281"}))
    # The family's own builds (file names carry it, URL-quoted), not only noarch ones.
    assert any("%5B88f6281%5D.spk" in entry["link"] for entry in entries)
    assert all("arch=88f628x&" in entry["link"] for entry in entries)


def test_major_comes_from_the_firmware_table(client: httpx.Client) -> None:
    base = {"arch": "x86_64", "language": "enu"}
    assert (
        nas(client, {**base, "build": "42661"}).content == nas(client, {**base, "build": "42661", "major": "7"}).content
    )
    assert (
        nas(client, {**base, "build": "25556"}).content == nas(client, {**base, "build": "25556", "major": "6"}).content
    )
    # The explicit major wins: DSM 6 packages asked by a DSM 7 build are another answer.
    assert (
        nas(client, {**base, "build": "42661", "major": "6"}).content != nas(client, {**base, "build": "42661"}).content
    )


def test_beta_only_on_the_beta_channel_below_dsm7(client: httpx.Client, tables: data.Tables) -> None:
    dsm6 = {"arch": "x86_64", "build": "24922", "language": "enu"}
    stable = packages(nas(client, dsm6))
    beta = packages(nas(client, {**dsm6, "package_update_channel": "beta"}))
    assert not any(entry.get("beta") for entry in stable)
    assert any(entry.get("beta") and entry["report_url"] for entry in beta)
    dsm7 = {"arch": "x86_64", "build": "42661", "language": "enu"}
    # The data has betas DSM 7 would otherwise list: the rule, not their absence, keeps them out.
    assert expected_builds(tables, "x86_64", 42661, 7, True) != expected_builds(tables, "x86_64", 42661, 7, False)
    asked = nas(client, {**dsm7, "package_update_channel": "beta"})
    assert asked.content == nas(client, dsm7).content
    assert not any(entry.get("beta") for entry in packages(asked))


def test_translations_fall_back_to_english(client: httpx.Client) -> None:
    english = {entry["package"]: entry for entry in packages(nas(client, {**SAMPLES[0], "language": "enu"}))}
    german = packages(nas(client, {**SAMPLES[0], "language": "ger"}))
    translated = [entry for entry in german if entry["dname"].endswith("(ger)")]
    untranslated = [entry for entry in german if not entry["dname"].endswith("(ger)")]
    assert translated and untranslated
    for entry in untranslated:
        assert (entry["dname"], entry["desc"]) == (
            english[entry["package"]]["dname"],
            english[entry["package"]]["desc"],
        )
    for entry in translated:
        assert entry["desc"] != english[entry["package"]]["desc"]


def test_a_form_post_answers_like_a_get(client: httpx.Client) -> None:
    values = SAMPLES[2]
    get = nas(client, values)
    post = client.post("/nas/", data=values)
    assert post.status_code == 200 and post.content == get.content
    # The query string comes first, as in spkrepo's request.values.
    mixed = client.post("/nas/", params={"language": "enu"}, data={**values, "language": "fre"})
    assert mixed.content == nas(client, {**values, "language": "enu"}).content


def test_urls_are_absolute_on_the_requests_host(client: httpx.Client) -> None:
    entries = packages(nas(client, SAMPLES[1], headers={"Host": "catalog.example:8443"}))
    urls = [entry["link"] for entry in entries]
    for entry in entries:
        urls += entry["thumbnail"] + entry["snapshot"] + entry.get("thumbnail_retina", [])
    assert len(urls) > 3 * len(entries)
    assert all(url.startswith("http://catalog.example:8443/nas/") for url in urls), urls[:3]


# ---------------------------------------------------------------------------
# The cache (rush App, SQLite, one worker)


@pytest.fixture(scope="module")
def private_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of the cache tests' own, which they change."""
    path = tmp_path_factory.mktemp("catalog-cache") / "catalog.sqlite3"
    data.build(str(path))
    return path


@pytest.fixture(scope="module")
def cached(module_servers: ServerFactory, private_sqlite: Path) -> Iterator[httpx.Client]:
    server = start(module_servers, RUSH_APP, f"sqlite:///{private_sqlite}")
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        yield client


def test_a_hit_calls_neither_the_handler_nor_the_database(cached: httpx.Client) -> None:
    values = {"arch": "avoton", "build": "42661", "language": "ita"}
    before = queries(cached)
    first = nas(cached, values)
    after_miss = queries(cached)
    assert after_miss > before
    second = nas(cached, values)
    # Other parameters (DSM sends micro and minor) and their order do not split the cache.
    third = cached.get(
        "/nas/", params={"minor": "2", "language": "ita", "build": "42661", "micro": "1", "arch": "avoton"}
    )
    assert queries(cached) == after_miss
    assert first.content == second.content == third.content
    assert "age" in second.headers and "age" not in first.headers


def test_the_host_is_part_of_the_key(cached: httpx.Client) -> None:
    values = {"arch": "denverton", "build": "64570", "language": "enu"}
    one = nas(cached, values, headers={"Host": "one.example"})
    start_count = queries(cached)
    two = nas(cached, values, headers={"Host": "two.example"})
    assert queries(cached) > start_count
    assert "http://two.example/nas/" in two.text and "one.example" not in two.text
    middle = queries(cached)
    again = nas(cached, values, headers={"Host": "one.example"})
    assert again.content == one.content and queries(cached) == middle


def test_invalidation_serves_the_changed_data(cached: httpx.Client, private_sqlite: Path) -> None:
    values = {"arch": "geminilake", "build": "42661", "language": "enu"}
    before = packages(nas(cached, values))
    name = before[0]["package"]
    with sqlite3.connect(private_sqlite) as connection:
        connection.execute(
            "UPDATE displayname SET displayname = 'Renamed' WHERE language_id = 1 AND version_id IN "
            "(SELECT v.id FROM version v JOIN package p ON p.id = v.package_id WHERE p.name = ?)",
            (name,),
        )
    # Still the cached answer: nothing told the cache.
    assert packages(nas(cached, values))[0]["dname"] == before[0]["dname"]
    count = queries(cached)
    assert cached.post("/_catalog/invalidate").status_code == 200
    after = packages(nas(cached, values))
    assert after[0]["package"] == name and after[0]["dname"] == "Renamed"
    assert queries(cached) > count


def test_with_the_cache_off_every_request_queries(module_servers: ServerFactory, sqlite_url: str) -> None:
    server = start(module_servers, RUSH_APP, sqlite_url, cache=False)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        nas(client, SAMPLES[0])
        count = queries(client)
        second = nas(client, SAMPLES[0])
        assert second.status_code == 200 and "age" not in second.headers
        assert queries(client) == count + 2  # the builds, then their icons, screenshots and services


def test_admin_endpoints_only_when_asked(module_servers: ServerFactory, sqlite_url: str) -> None:
    server = start(module_servers, RUSH_APP, sqlite_url, admin=False)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        assert client.get("/_catalog/stats").status_code == 404
        assert client.post("/_catalog/invalidate").status_code in (404, 405)
        assert nas(client, SAMPLES[0]).status_code == 200


# ---------------------------------------------------------------------------
# The twins: same bytes from Flask (rush WSGI) and FastAPI (rush ASGI)


@pytest.fixture(scope="module")
def twins(module_servers: ServerFactory, database_url: str) -> dict[str, RushServer]:
    servers = {
        # Flask-Caching off: the twin as it runs behind rush's cache, and for the cold benchmarks.
        "flask": start(module_servers, FLASK_APP, database_url, "--interface", "wsgi", cache=False),
        "fastapi": start(module_servers, FASTAPI_APP, database_url, "--interface", "asgi"),
    }
    if database_url.startswith("postgresql"):
        # The rush App's blocking handlers (CATALOG_ASYNC=0; async on psycopg's pool by default).
        servers["rush-blocking"] = start(module_servers, RUSH_APP, database_url, asynchronous=False)
    return servers


def test_the_twins_answer_the_same_bytes(rush_app: RushServer, twins: dict[str, RushServer]) -> None:
    cases: list[Callable[[httpx.Client], httpx.Response]] = [
        *(lambda c, v=values: nas(c, v) for values in SAMPLES),
        lambda c: c.post("/nas/", data=SAMPLES[2]),
        lambda c: nas(c, SAMPLES[0], headers={"Host": "mirror.example"}),
        lambda c: nas(c, {"arch": "x86_64", "build": "42661"}),
        lambda c: nas(c, {"arch": "vax", "build": "42661", "language": "enu"}),
        lambda c: nas(c, {"arch": "x86_64", "build": "4000", "language": "enu"}),
    ]
    # One Host for all (each server has its own port, which the URLs would otherwise carry).
    host = {"Host": "catalog.test"}
    with httpx.Client(base_url=rush_app.url, timeout=GUARD_TIMEOUT, headers=host) as reference:
        expected = [case(reference) for case in cases]
    for name, server in twins.items():
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT, headers=host) as client:
            for index, case in enumerate(cases):
                response = case(client)
                assert response.status_code == expected[index].status_code, (name, index)
                if response.status_code == 200:
                    assert response.content == expected[index].content, (name, index)
                    assert response.headers["content-type"].startswith("application/json")


RUSH_CACHE_FLAG = "/nas/:ttl=600,vary_query=arch|build|language|major|package_update_channel,vary_headers=host"


def test_rush_caches_the_flask_twin_without_code_changes(module_servers: ServerFactory, private_sqlite: Path) -> None:
    """rush's --cache in front of the unchanged Flask twin (Flask-Caching off): hits query nothing,
    the Host is in the key (spkrepo's bug gone), and the twin's invalidation reaches rush."""
    server = start(
        module_servers,
        FLASK_APP,
        f"sqlite:///{private_sqlite}",
        "--interface",
        "wsgi",
        "--cache",
        RUSH_CACHE_FLAG,
        cache=False,
    )
    values = {"arch": "kvmx64", "build": "69057", "language": "nld"}
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        first = nas(client, values, headers={"Host": "first.example"})
        count = queries(client)
        again = nas(client, {**values, "micro": "3"}, headers={"Host": "first.example"})
        assert queries(client) == count and again.content == first.content and "age" in again.headers
        other = nas(client, values, headers={"Host": "second.example"})
        assert queries(client) > count and "http://second.example/nas/" in other.text
        count = queries(client)
        assert client.post("/_catalog/invalidate").status_code == 200
        nas(client, values, headers={"Host": "first.example"})
        assert queries(client) > count


def test_async_handlers_on_postgresql_are_cached(module_servers: ServerFactory, postgresql_url: str) -> None:
    """The rush App's async handlers (psycopg's pool) are cached like the blocking ones."""
    server = start(module_servers, RUSH_APP, postgresql_url, asynchronous=True)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        nas(client, SAMPLES[0])
        count = queries(client)
        assert nas(client, SAMPLES[0]).status_code == 200
        assert queries(client) == count


def test_the_flask_twin_with_flask_caching_serves_the_first_host_to_everyone(
    module_servers: ServerFactory, sqlite_url: str
) -> None:
    """spkrepo's memoized key has no Host: reproduced on purpose, so the benchmark measures the
    configuration spkrepo runs; the rush App above keys on the Host."""
    server = start(module_servers, FLASK_APP, sqlite_url, "--interface", "wsgi", cache=True)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        first = nas(client, SAMPLES[1], headers={"Host": "first.example"})
        count = queries(client)
        second = nas(client, SAMPLES[1], headers={"Host": "second.example"})
        assert queries(client) == count, "a Flask-Caching hit"
        assert "http://first.example/nas/" in second.text and "second.example" not in second.text
        assert second.content == first.content


# ---------------------------------------------------------------------------
# The generator


def test_the_generator_is_deterministic_and_sized_like_the_real_catalog(tables: data.Tables) -> None:
    again = data.generate()
    assert again.rows == tables.rows
    assert data.generate(seed=5).rows != tables.rows
    counts = tables.count()
    assert counts["package"] == 200 and counts["language"] == 20 and 35 <= counts["architecture"] <= 45
    per_package: dict[int, int] = {}
    for row in tables.rows["version"]:
        per_package[row[1]] = per_package.get(row[1], 0) + 1
    assert set(per_package.values()) <= {2, 3, 4, 5} and len(per_package) == 200
    versions = {row[1] for row in tables.rows["firmware"] if row[3] == "dsm"}
    assert {"5.2", "6.2", "7.0", "7.2"} <= versions


def test_answers_are_tens_of_kilobytes(cached: httpx.Client) -> None:
    # Sizes do not depend on the database: the twins test shows the bytes are equal on each.
    sizes = [len(nas(cached, values).content) for values in SAMPLES]
    mean = sum(sizes) / len(sizes)
    assert 20_000 < mean < 150_000, sizes
    assert json.loads(nas(cached, SAMPLES[0]).content)
