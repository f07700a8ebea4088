"""The catalog itself: spkrepo's ``/nas/`` contract, its SQL and its JSON, shared by every front end.

Every front end (the rush App, the Flask twin, the FastAPI app) calls this
module, so they run the same SQL and answer the same bytes. The work is
written as generators that *yield* each query, ``(sql, params)``, and receive
its rows: `run` drives one with a blocking database, `run_async` with the
async pool. No code is duplicated between the blocking and the async path.

The contract (spkrepo's ``nas.catalog`` view, as issue 12 lists it):

* ``build``, ``arch`` and ``language`` are required (query string or form):
  400 when one is missing;
* 422 for an unknown language or architecture, a ``build`` or ``major`` that is
  not a number; ``arch`` ``88f6281``/``88f6282`` is read as ``88f628x``;
* ``major`` comes from the newest DSM firmware at or below ``build`` when the
  client does not send it; below every firmware no package qualifies, and
  the answer is the empty list in the build's shape (spkrepo compares only
  ``Firmware.build <= build``, so it answers 200 with ``[]`` there too);
* beta versions only with ``package_update_channel=beta`` and ``build`` below
  40000 (DSM 7 has no beta channel);
* three shapes: a bare list below build 5004 (DSM 5.0 and older), ``{"packages",
  "keyrings"}`` below 40000 (DSM 5.1 to 6.x), ``{"packages"}`` from 40000;
* ``link``, ``thumbnail``, ``thumbnail_retina`` and ``snapshot`` are absolute
  URLs made from the request's scheme and Host, which is why a cache of these
  answers must vary on the Host.

Selection: for each package, the newest version that has an eligible build
(active; for the architecture or noarch; minimum firmware at or below
``build`` and of the client's major, or a DSM 3 noarch build for majors below
6; maximum firmware, if any, at or above ``build``; not beta unless asked);
then that version's newest eligible minimum firmware; then its eligible
builds for it. spkrepo applies some of these filters only in some of its three
steps; here all of them apply throughout, and the answer is ordered (by
package name and build), so it is the same on every database.

A catalog costs two queries: the builds with their texts and counts, then
the icons, screenshots and service dependencies of those versions. The small
reference tables (languages, architectures, firmware) are read in one query
and kept for 600 s, as spkrepo memoizes its validity checks for 600 s;
`Catalog.invalidate` drops them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from examples.catalog.db import STATS, Row

# (sql, params) yielded by the steps; the rows come back.
Query = tuple[str, dict[str, Any]]
Steps = Generator[Query, list[Row], Any]

REFERENCE_TTL = 600.0
# Synology's names for the Marvell Kirkwood chips that spkrepo files under one architecture.
ARCH_FROM_SYNO = {"88f6281": "88f628x", "88f6282": "88f628x"}
# The parameters that decide an answer: what a cache in front of /nas/ must key on (plus the Host).
VARY_QUERY = ("arch", "build", "language", "major", "package_update_channel")
FALLBACK_LANGUAGE = "enu"
LIST_SHAPE_BELOW = 5004  # DSM 5.1: the answer became an object with keyrings
NO_BETA_FROM = 40000  # DSM 7.0: no keyrings, no beta channel
# A build or major number: digits only, small enough for every database's INTEGER.
NUMBER = re.compile(r"-?[0-9]{1,9}")

REFERENCE_SQL = """
SELECT 'language', id, code, name FROM language
UNION ALL SELECT 'architecture', id, code, '' FROM architecture
UNION ALL SELECT 'firmware', build, version, type FROM firmware
"""

# The eligible builds, the newest version per package among them, that version's newest minimum
# firmware, then the chosen builds with their package, version, texts in the asked language (or
# English) and download counts. Window functions pick the newest version and firmware in one pass
# over the eligible builds: with GROUP BY subqueries joined back, MariaDB evaluated the eligible
# builds once per reference (52 ms a catalog instead of a few). Only standard SQL that SQLite
# (3.25+), PostgreSQL and MariaDB (10.2+) all accept.
BUILDS_SQL = """
WITH eligible AS (
    SELECT b.id AS build_id, v.package_id AS package_id, v.version AS version, fmin.build AS firmware_build
    FROM architecture a
    JOIN build_architecture ba ON ba.architecture_id = a.id
    JOIN build b ON b.id = ba.build_id
    JOIN version v ON v.id = b.version_id
    JOIN firmware fmin ON fmin.id = b.firmware_min_id
    LEFT JOIN firmware fmax ON fmax.id = b.firmware_max_id
    WHERE a.code IN (:arch, 'noarch')
      AND b.active
      AND fmin.build <= :build
      AND (fmax.id IS NULL OR fmax.build >= :build)
      AND (:beta = 1 OR v.report_url IS NULL OR v.report_url = '')
      AND (fmin.version LIKE :major_prefix
           OR (a.code = 'noarch' AND :old_major = 1 AND fmin.version LIKE :dsm3_prefix))
),
newest_version AS (
    SELECT build_id, package_id, version, firmware_build,
           MAX(version) OVER (PARTITION BY package_id) AS newest
    FROM eligible
),
newest_firmware AS (
    SELECT build_id, firmware_build, MAX(firmware_build) OVER (PARTITION BY package_id) AS newest
    FROM newest_version
    WHERE version = newest
),
chosen AS (
    SELECT DISTINCT build_id FROM newest_firmware WHERE firmware_build = newest
)
SELECT b.id, v.id, p.id, p.name, v.version, v.upstream_version,
       COALESCE(dn.displayname, dn_fallback.displayname),
       COALESCE(bd.description, bd_fallback.description),
       b.path, v.license, v.install_wizard, v.upgrade_wizard, v.startable,
       v.dependencies, v.conflicts,
       COALESCE(counts.download_count, 0), COALESCE(counts.recent_download_count, 0),
       v.report_url, b.changelog, v.distributor, v.distributor_url, v.maintainer, v.maintainer_url,
       b.md5, b.size
FROM chosen c
JOIN build b ON b.id = c.build_id
JOIN version v ON v.id = b.version_id
JOIN package p ON p.id = v.package_id
LEFT JOIN displayname dn ON dn.version_id = v.id AND dn.language_id = :language_id
LEFT JOIN displayname dn_fallback ON dn_fallback.version_id = v.id AND dn_fallback.language_id = :fallback_id
LEFT JOIN build_description bd ON bd.build_id = b.id AND bd.language_id = :language_id
LEFT JOIN build_description bd_fallback ON bd_fallback.build_id = b.id AND bd_fallback.language_id = :fallback_id
LEFT JOIN package_download_counts counts ON counts.package_id = p.id
ORDER BY p.name, b.id
"""


def media_sql(versions: int, packages: int) -> str:
    """Icons and service dependencies of ``versions`` versions and screenshots of ``packages``
    packages, in one query (parameters :v0.. and :p0..; rows ordered by kind, owner, id)."""
    version_list = ", ".join(f":v{index}" for index in range(versions))
    package_list = ", ".join(f":p{index}" for index in range(packages))
    return f"""
SELECT 'icon', version_id, id, size, path FROM icon WHERE version_id IN ({version_list})
UNION ALL
SELECT 'screenshot', package_id, id, '', path FROM screenshot WHERE package_id IN ({package_list})
UNION ALL
SELECT 'service', vsd.version_id, s.id, '', s.code
FROM version_service_dependency vsd JOIN service s ON s.id = vsd.service_id
WHERE vsd.version_id IN ({version_list})
ORDER BY 1, 2, 3
"""


@dataclass(frozen=True)
class Reference:
    """The small tables every request consults, read at once and kept for REFERENCE_TTL."""

    languages: dict[str, int]
    architectures: dict[str, int]
    dsm_firmware: tuple[tuple[int, str], ...]  # (build, version), ascending by build
    loaded_at: float

    def major_for(self, build: int) -> int | None:
        """The major version of the newest DSM firmware at or below ``build`` (None if none)."""
        found = None
        for firmware_build, version in self.dsm_firmware:
            if firmware_build > build:
                break
            found = version
        return int(found.split(".")[0]) if found else None


@dataclass(frozen=True)
class Selection:
    """A valid request: what the answer depends on (besides the base URL)."""

    arch: str
    build: int
    #: None below every DSM firmware: nothing qualifies.
    major: int | None
    language: str
    beta: bool


@dataclass(frozen=True)
class Rejection:
    status: int
    reason: str


class Catalog:
    """The queries and the JSON of /nas/. One per process; holds only the reference tables."""

    def __init__(self, reference_ttl: float = REFERENCE_TTL) -> None:
        self.reference_ttl = reference_ttl
        self._reference: Reference | None = None

    def invalidate(self) -> None:
        """Forgets the reference tables (after an administrator changed them)."""
        self._reference = None

    def reference(self) -> Steps:
        reference = self._reference
        if reference is not None and time.monotonic() - reference.loaded_at < self.reference_ttl:
            return reference
        rows = yield (REFERENCE_SQL, {})
        languages, architectures, firmware = {}, {}, []
        for kind, number, code, extra in rows:
            if kind == "language":
                languages[code] = number
            elif kind == "architecture":
                architectures[code] = number
            elif extra == "dsm":
                firmware.append((number, code))
        reference = Reference(languages, architectures, tuple(sorted(firmware)), time.monotonic())
        self._reference = reference
        return reference

    def select(self, values: Mapping[str, str]) -> Steps:
        """The request's parameters checked against the contract: a Selection or a Rejection."""
        if "build" not in values or "arch" not in values or "language" not in values:
            return Rejection(400, "build, arch and language are required")
        reference = yield from self.reference()
        language = values["language"]
        if language not in reference.languages:
            return Rejection(422, f"unknown language {language!r}")
        arch = ARCH_FROM_SYNO.get(values["arch"], values["arch"])
        if arch not in reference.architectures:
            return Rejection(422, f"unknown architecture {values['arch']!r}")
        if not NUMBER.fullmatch(values["build"]):
            return Rejection(422, f"build {values['build']!r} is not a number")
        build = int(values["build"])
        beta = build < NO_BETA_FROM and values.get("package_update_channel") == "beta"
        if "major" in values:
            if not NUMBER.fullmatch(values["major"]):
                return Rejection(422, f"major {values['major']!r} is not a number")
            major = int(values["major"])
        else:
            major = reference.major_for(build)
        return Selection(arch, build, major, language, beta)

    def document(self, selection: Selection, base_url: str) -> Steps:
        """The catalog for ``selection`` as Python data, URLs under ``base_url`` (scheme://host)."""
        reference = yield from self.reference()
        if selection.major is None:
            return shaped([], selection.build)
        rows = yield (
            BUILDS_SQL,
            {
                "arch": selection.arch,
                "build": selection.build,
                "beta": 1 if selection.beta else 0,
                "major_prefix": f"{selection.major}.%",
                "old_major": 1 if selection.major < 6 else 0,
                "dsm3_prefix": "3.%",
                "language_id": reference.languages[selection.language],
                "fallback_id": reference.languages[FALLBACK_LANGUAGE],
            },
        )
        icons: dict[int, list[tuple[int, str]]] = {}
        screenshots: dict[int, list[str]] = {}
        services: dict[int, list[str]] = {}
        if rows:
            versions = sorted({row[1] for row in rows})
            packages = sorted({row[2] for row in rows})
            params = {f"v{index}": value for index, value in enumerate(versions)}
            params.update({f"p{index}": value for index, value in enumerate(packages)})
            for kind, owner, _, size, path in (yield (media_sql(len(versions), len(packages)), params)):
                if kind == "icon":
                    icons.setdefault(owner, []).append((int(size), path))
                elif kind == "screenshot":
                    screenshots.setdefault(owner, []).append(path)
                else:
                    services.setdefault(owner, []).append(path)
        started = time.perf_counter()
        packages_json = [
            entry(row, selection, base_url, sorted(icons.get(row[1], [])), screenshots.get(row[2], []), services)
            for row in rows
        ]
        result = shaped(packages_json, selection.build)
        STATS.add_catalog(time.perf_counter() - started)
        return result

    def answer(self, values: Mapping[str, str], base_url: str) -> Steps:
        """The whole request: (status, body bytes, content type)."""
        selection = yield from self.select(values)
        if isinstance(selection, Rejection):
            return reject(selection)
        document = yield from self.document(selection, base_url)
        return 200, encode(document), "application/json"


def shaped(packages_json: list[Any], build: int) -> Any:
    """The packages in the shape a client of ``build`` reads."""
    if build < LIST_SHAPE_BELOW:
        return packages_json
    if build < NO_BETA_FROM:
        # spkrepo exports its GnuPG public key here when it has one configured; this example has none.
        return {"packages": packages_json, "keyrings": []}
    return {"packages": packages_json}


def reject(rejection: Rejection) -> tuple[int, bytes, str]:
    return rejection.status, f"{rejection.reason}\n".encode(), "text/plain; charset=utf-8"


def url(base_url: str, path: str) -> str:
    return f"{base_url}/nas/{quote(path)}"


def entry(
    row: Row,
    selection: Selection,
    base_url: str,
    icons: list[tuple[int, str]],
    screenshots: list[str],
    services: dict[int, list[str]],
) -> dict[str, Any]:
    """One package of the answer, with spkrepo's keys, in spkrepo's order."""
    (
        _build_id,
        version_id,
        _package_id,
        name,
        revision,
        upstream,
        displayname,
        description,
        path,
        license_text,
        install_wizard,
        upgrade_wizard,
        startable,
        dependencies,
        conflicts,
        downloads,
        recent_downloads,
        report_url,
        changelog,
        distributor,
        distributor_url,
        maintainer,
        maintainer_url,
        md5,
        size,
    ) = row
    # Booleans come back as bool (PostgreSQL) or 0/1 (SQLite, MariaDB); None stays None.
    install_wizard = None if install_wizard is None else bool(install_wizard)
    upgrade_wizard = None if upgrade_wizard is None else bool(upgrade_wizard)
    startable = None if startable is None else bool(startable)
    quick = license_text is None and install_wizard is False
    result: dict[str, Any] = {
        "package": name,
        "version": f"{upstream}-{revision}",
        "dname": displayname,
        "desc": description,
        "link": f"{url(base_url, path)}?arch={quote(selection.arch)}&build={selection.build}",
        "thumbnail": [url(base_url, icon_path) for _, icon_path in icons],
        "qinst": quick,
        "qupgrade": license_text is None and upgrade_wizard is False,
        "qstart": quick and startable is not False,
        "deppkgs": dependencies,
        "conflictpkgs": conflicts,
        "download_count": int(downloads),
        "recent_download_count": int(recent_downloads),
        "snapshot": [url(base_url, screenshot) for screenshot in screenshots],
    }
    if report_url:
        result["report_url"] = report_url
        result["beta"] = True
    for key, value in (
        ("changelog", changelog),
        ("distributor", distributor),
        ("distributor_url", distributor_url),
        ("maintainer", maintainer),
        ("maintainer_url", maintainer_url),
        ("md5", md5),
        ("size", size),
    ):
        if value:
            result[key] = value
    retina = [icon_path for icon_size, icon_path in icons if icon_size == 256]
    if retina:
        result["thumbnail_retina"] = [url(base_url, retina[0])] * 2
    if startable is not None:
        result["startable"] = "yes" if startable else "no"
    if services.get(version_id):
        result["depsers"] = " ".join(services[version_id])
    return result


def encode(document: Any) -> bytes:
    """The answer's bytes (spkrepo's json.dumps defaults, UTF-8 kept as is); timed in STATS."""
    started = time.perf_counter()
    body = json.dumps(document, ensure_ascii=False).encode()
    STATS.add_encode(time.perf_counter() - started)
    return body


def run(steps: Steps, fetch: Callable[[str, dict[str, Any]], list[Row]]) -> Any:
    """Drives ``steps`` with a blocking ``fetch``; returns what the steps return."""
    try:
        query = next(steps)
        while True:
            query = steps.send(fetch(*query))
    except StopIteration as done:
        return done.value


async def run_async(steps: Steps, fetch: Callable[[str, dict[str, Any]], Awaitable[list[Row]]]) -> Any:
    """Drives ``steps`` with an async ``fetch``."""
    try:
        query = next(steps)
        while True:
            query = steps.send(await fetch(*query))
    except StopIteration as done:
        return done.value


def form_values(query: Mapping[str, str], content_type: str | None, body: bytes) -> dict[str, str]:
    """spkrepo's ``request.values``: the query string, then (for a form POST) the form's fields
    where the query string does not have them."""
    from urllib.parse import parse_qsl

    values = dict(query)
    if body and (content_type or "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
            values.setdefault(name, value)
    return values
