"""A seeded, deterministic generator of catalog data, and loading it into any of the databases.

`generate(seed)` returns every table's rows as lists of tuples: the same seed
gives the same rows on every machine and Python version (only `random.Random`
with an explicit seed and ordered lists are used). The default data set is
close to what a SynoCommunity repository serves: 200 packages with 2 to 5
versions each, one build per (version, firmware line, architecture family),
a family covering several of the 43 architecture codes (x86_64, apollolake,
armada38x, 88f628x, ...; one is "noarch"), 20 languages (every package has
English, some have translations), firmware from DSM 5.0 to 7.2 plus SRM,
icons, screenshots, services and download counts. A catalog answer for a
common architecture lists about a hundred packages, some tens of kB of JSON,
like the real one.

`load(database, tables)` creates the schema (schema.sql) and inserts the
rows table by table, in foreign-key order. `build(url)` does both; the command
``python -m examples.catalog build --db URL`` calls it.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from examples.catalog.db import SCHEMA, Database, connect

DEFAULT_SEED = 4  # seed 004
DEFAULT_PACKAGES = 200

# The languages DSM asks with (its three-letter codes).
LANGUAGES = (
    ("enu", "English"),
    ("chs", "Chinese simplified"),
    ("cht", "Chinese traditional"),
    ("csy", "Czech"),
    ("dan", "Danish"),
    ("fre", "French"),
    ("ger", "German"),
    ("hun", "Hungarian"),
    ("ita", "Italian"),
    ("jpn", "Japanese"),
    ("krn", "Korean"),
    ("nld", "Dutch"),
    ("nor", "Norwegian"),
    ("plk", "Polish"),
    ("ptb", "Brazilian Portuguese"),
    ("ptg", "European Portuguese"),
    ("rus", "Russian"),
    ("spn", "Spanish"),
    ("sve", "Swedish"),
    ("trk", "Turkish"),
)

# Architecture families as spksrc builds them: one .spk per family, valid on each listed code.
ARCH_FAMILIES: dict[str, tuple[str, ...]] = {
    "x64": (
        "x86_64",
        "apollolake",
        "avoton",
        "braswell",
        "broadwell",
        "broadwellnk",
        "broadwellnkv2",
        "bromolow",
        "cedarview",
        "denverton",
        "geminilake",
        "grantley",
        "kvmx64",
        "purley",
        "r1000",
        "v1000",
        "epyc7002",
    ),
    "i686": ("x86", "evansport"),
    "aarch64": ("aarch64", "armada37xx", "rtd1296", "rtd1619b"),
    "armv7": (
        "armv7",
        "alpine",
        "alpine4k",
        "armada370",
        "armada375",
        "armada38x",
        "armadaxp",
        "comcerto2k",
        "monaco",
        "hi3535",
        "ipq806x",
        "dakota",
    ),
    "88f6281": ("88f628x",),
    "ppc": ("qoriq", "ppc853x", "ppc854x"),
}
ARCHITECTURES = ("noarch", *(code for codes in ARCH_FAMILIES.values() for code in codes))
# How often a package is built for each family (most for x64, armv7 and aarch64, as on SynoCommunity).
FAMILY_WEIGHTS = {"x64": 0.8, "aarch64": 0.55, "armv7": 0.5, "i686": 0.35, "88f6281": 0.2, "ppc": 0.15}

# (version, build, type): Synology's firmware numbers (as spkrepo's own test data lists them).
FIRMWARE = (
    ("5.0", 4458, "dsm"),
    ("5.1", 5004, "dsm"),
    ("5.2", 5644, "dsm"),
    ("5.2", 5967, "dsm"),
    ("6.0", 7321, "dsm"),
    ("6.1", 15047, "dsm"),
    ("6.2", 23739, "dsm"),
    ("6.2", 24922, "dsm"),
    ("6.2", 25556, "dsm"),
    ("7.0", 41890, "dsm"),
    ("7.1", 42661, "dsm"),
    ("7.2", 64570, "dsm"),
    ("7.2", 69057, "dsm"),
    ("1.2", 7742, "srm"),
    ("1.3", 9193, "srm"),
)
# The firmware a build may require: a line per DSM major, oldest first.
FIRMWARE_LINES = {5: (4458, 5644), 6: (15047, 23739), 7: (41890, 42661, 64570)}

SERVICES = ("apache-web", "mysql", "pgsql", "nginx", "ssh", "php7", "php8", "webdav", "nfs", "smb")

WORDS = (
    "a fast open source tool to manage synchronise and share your files media photos and music "
    "across devices with a web interface automatic updates backups scheduled tasks notifications "
    "secure remote access plugins for every need lightweight server daemon that runs quietly in "
    "the background monitors downloads indexes libraries streams video to televisions phones and "
    "tablets keeps logs rotates archives compresses data with modern algorithms"
).split()
NAME_PARTS = (
    "sab",
    "git",
    "node",
    "media",
    "sync",
    "radar",
    "sonar",
    "jelly",
    "home",
    "mqtt",
    "zero",
    "tor",
    "py",
    "go",
    "red",
    "cloud",
    "nzb",
    "torrent",
    "mon",
    "dns",
    "vpn",
    "backup",
    "photo",
    "music",
    "book",
    "ffmpeg",
    "lidarr",
    "pihole",
    "domoticz",
    "znc",
)


@dataclass
class Tables:
    """Each table's rows, in the column order of `COLUMNS`."""

    rows: dict[str, list[tuple[Any, ...]]]

    def count(self) -> dict[str, int]:
        return {table: len(rows) for table, rows in self.rows.items()}


# Insert order (foreign keys first) and columns of every table.
COLUMNS: dict[str, tuple[str, ...]] = {
    "architecture": ("id", "code"),
    "language": ("id", "code", "name"),
    "firmware": ("id", "version", "build", "type"),
    "service": ("id", "code"),
    "package": ("id", "name"),
    "package_download_counts": ("package_id", "download_count", "recent_download_count"),
    "screenshot": ("id", "package_id", "path"),
    "version": (
        "id",
        "package_id",
        "version",
        "upstream_version",
        "report_url",
        "distributor",
        "distributor_url",
        "maintainer",
        "maintainer_url",
        "dependencies",
        "conflicts",
        "install_wizard",
        "upgrade_wizard",
        "startable",
        "license",
    ),
    "version_service_dependency": ("version_id", "service_id"),
    "displayname": ("version_id", "language_id", "displayname"),
    "icon": ("id", "version_id", "size", "path"),
    "build": (
        "id",
        "version_id",
        "firmware_min_id",
        "firmware_max_id",
        "path",
        "changelog",
        "md5",
        "size",
        "active",
    ),
    "build_architecture": ("build_id", "architecture_id"),
    "build_description": ("build_id", "language_id", "description"),
}


def sentence(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


def generate(seed: int = DEFAULT_SEED, packages: int = DEFAULT_PACKAGES) -> Tables:
    """Every table's rows for ``packages`` packages, from ``seed`` alone."""
    rng = random.Random(seed)
    rows: dict[str, list[tuple[Any, ...]]] = {table: [] for table in COLUMNS}
    rows["architecture"] = [(index + 1, code) for index, code in enumerate(ARCHITECTURES)]
    arch_id = {code: index + 1 for index, code in enumerate(ARCHITECTURES)}
    rows["language"] = [(index + 1, code, name) for index, (code, name) in enumerate(LANGUAGES)]
    rows["firmware"] = [(index + 1, version, build, kind) for index, (version, build, kind) in enumerate(FIRMWARE)]
    firmware_id = {build: index + 1 for index, (_, build, _) in enumerate(FIRMWARE)}
    rows["service"] = [(index + 1, code) for index, code in enumerate(SERVICES)]

    names: list[str] = []
    while len(names) < packages:
        name = rng.choice(NAME_PARTS) + rng.choice(NAME_PARTS)
        name = name if name not in names else f"{name}{len(names)}"
        names.append(name)

    version_id = icon_id = build_id = screenshot_id = 0
    for package_id, name in enumerate(names, start=1):
        rows["package"].append((package_id, name))
        total = rng.randint(200, 400_000)
        rows["package_download_counts"].append((package_id, total, rng.randint(0, total // 10)))
        for number in range(rng.randint(0, 3)):
            screenshot_id += 1
            rows["screenshot"].append((screenshot_id, package_id, f"{name}/screenshot_{number + 1}.png"))
        noarch = rng.random() < 0.15
        families = ["noarch"] if noarch else [f for f, weight in FAMILY_WEIGHTS.items() if rng.random() < weight]
        families = families or ["x64"]
        languages = [1, *sorted(rng.sample(range(2, len(LANGUAGES) + 1), rng.randint(0, 6)))]
        display = name.capitalize()
        maintainer = rng.choice(("SynoCommunity", "hgy59", "th0ma7", "mreid-tt", "publicarray", "Diaoul"))
        # Older packages start on DSM 5; newer ones on DSM 6 or 7.
        first_major = rng.choice((5, 5, 6, 6, 7))
        # About a third of the packages were never ported to DSM 7 (their last builds are for DSM 6).
        last_major = 6 if first_major < 7 and rng.random() < 0.35 else 7
        version_count = rng.randint(2, 5)
        upstream = [rng.randint(0, 3), rng.randint(0, 20), 0]
        for index in range(version_count):
            version_id += 1
            upstream[2] += rng.randint(1, 4)
            revision = index + 1 + rng.randint(0, 3) * 10
            latest = index == version_count - 1
            beta = latest and rng.random() < 0.2
            needs_wizard = rng.random() < 0.3
            rows["version"].append(
                (
                    version_id,
                    package_id,
                    revision,
                    ".".join(map(str, upstream)),
                    f"https://github.com/SynoCommunity/spksrc/issues/{rng.randint(100, 6000)}" if beta else None,
                    f"{display} project" if rng.random() < 0.6 else None,
                    f"https://{name}.example.org/" if rng.random() < 0.6 else None,
                    maintainer,
                    f"https://github.com/{maintainer}",
                    rng.choice((None, None, "python312", "ffmpeg7", "python312 ffmpeg7")),
                    rng.choice((None, None, None, f"{name}-legacy")),
                    needs_wizard,
                    needs_wizard and rng.random() < 0.5,
                    rng.choice((True, True, False, None)),
                    "GPL-2.0" if rng.random() < 0.1 else None,
                )
            )
            for service_id in sorted(rng.sample(range(1, len(SERVICES) + 1), rng.choice((0, 0, 0, 1, 2)))):
                rows["version_service_dependency"].append((version_id, service_id))
            for language_id in languages:
                suffix = "" if language_id == 1 else f" ({LANGUAGES[language_id - 1][0]})"
                rows["displayname"].append((version_id, language_id, f"{display}{suffix}"))
            for size in ("72", "120", "256") if rng.random() < 0.5 else ("72", "120"):
                icon_id += 1
                rows["icon"].append((icon_id, version_id, size, f"{name}/{revision}/icon_{size}.png"))
            # Later versions drop the oldest firmware lines, as packages move on.
            lowest = min(first_major + (index * 2) // version_count, last_major)
            majors = [major for major in (5, 6, 7) if lowest <= major <= last_major]
            descriptions = {language_id: sentence(rng, 6, 22) for language_id in languages}
            changelog = sentence(rng, 4, 12)
            for major in majors:
                line = FIRMWARE_LINES[major]
                firmware_min = line[min(index, len(line) - 1)] if rng.random() < 0.7 else line[0]
                for family in families:
                    build_id += 1
                    path = f"{name}/{revision}/{name}.v{revision}.f{firmware_min}[{family}].spk"
                    # A few builds stop at a later firmware of their line (spkrepo's firmware_max).
                    firmware_max = firmware_id[line[-1]] if rng.random() < 0.05 and line[-1] > firmware_min else None
                    rows["build"].append(
                        (
                            build_id,
                            version_id,
                            firmware_id[firmware_min],
                            firmware_max,
                            path,
                            changelog,
                            hashlib.md5(path.encode(), usedforsecurity=False).hexdigest(),
                            rng.randint(100_000, 90_000_000),
                            rng.random() > 0.03,
                        )
                    )
                    codes = ("noarch",) if family == "noarch" else ARCH_FAMILIES[family]
                    rows["build_architecture"].extend((build_id, arch_id[code]) for code in codes)
                    rows["build_description"].extend(
                        (build_id, language_id, text) for language_id, text in descriptions.items()
                    )
    return Tables(rows)


def load(database: Database, tables: Tables) -> None:
    """Creates the schema and inserts every table (the database must be empty)."""
    database.execute_script(SCHEMA.read_text())
    for table, columns in COLUMNS.items():
        database.insert(table, columns, tables.rows[table])


def build(url: str | None, seed: int = DEFAULT_SEED, packages: int = DEFAULT_PACKAGES) -> dict[str, int]:
    """Fills the (empty) database at ``url`` with the generated data; returns the row counts."""
    database = connect(url)
    assert isinstance(database, Database)
    tables = generate(seed, packages)
    try:
        load(database, tables)
    finally:
        database.close()
    return tables.count()
