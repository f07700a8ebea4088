-- The package catalog's tables: spkrepo's data model for what /nas/ reads, as one DDL that runs
-- unchanged on SQLite, PostgreSQL and MariaDB (examples/catalog/README.md).
--
-- Portable on purpose: ids are plain INTEGER PRIMARY KEY filled by the generator (no
-- AUTOINCREMENT/SERIAL/AUTO_INCREMENT dialects), VARCHAR(n) and TEXT for strings, BOOLEAN (SQLite
-- stores 0/1, MariaDB TINYINT(1), PostgreSQL boolean), no dates. Statements are separated by a
-- semicolon at the end of a line; db.py splits on that and runs them one by one (drivers differ in
-- whether they accept several statements per call). Index names are unique per database, as
-- PostgreSQL requires.

CREATE TABLE architecture (
    id INTEGER PRIMARY KEY,
    code VARCHAR(20) NOT NULL UNIQUE
);

CREATE TABLE language (
    id INTEGER PRIMARY KEY,
    code VARCHAR(3) NOT NULL UNIQUE,
    name VARCHAR(50)
);

-- A DSM or SRM release: version is "major.minor" (spkrepo keeps 4 characters), build its number.
CREATE TABLE firmware (
    id INTEGER PRIMARY KEY,
    version VARCHAR(4) NOT NULL,
    build INTEGER NOT NULL UNIQUE,
    type VARCHAR(4) NOT NULL
);

CREATE TABLE service (
    id INTEGER PRIMARY KEY,
    code VARCHAR(30) NOT NULL UNIQUE
);

CREATE TABLE package (
    id INTEGER PRIMARY KEY,
    name VARCHAR(50) NOT NULL UNIQUE
);

-- spkrepo keeps these in a materialized view over its download statistics; a table here.
CREATE TABLE package_download_counts (
    package_id INTEGER PRIMARY KEY REFERENCES package (id),
    download_count BIGINT NOT NULL,
    recent_download_count BIGINT NOT NULL
);

CREATE TABLE screenshot (
    id INTEGER PRIMARY KEY,
    package_id INTEGER NOT NULL REFERENCES package (id),
    path VARCHAR(200) NOT NULL
);

-- A released version of a package; report_url set (not empty) marks a beta.
CREATE TABLE version (
    id INTEGER PRIMARY KEY,
    package_id INTEGER NOT NULL REFERENCES package (id),
    version INTEGER NOT NULL,
    upstream_version VARCHAR(20) NOT NULL,
    report_url VARCHAR(255),
    distributor VARCHAR(50),
    distributor_url VARCHAR(255),
    maintainer VARCHAR(50),
    maintainer_url VARCHAR(255),
    dependencies VARCHAR(255),
    conflicts VARCHAR(255),
    install_wizard BOOLEAN,
    upgrade_wizard BOOLEAN,
    startable BOOLEAN,
    license TEXT,
    UNIQUE (package_id, version)
);

CREATE TABLE version_service_dependency (
    version_id INTEGER NOT NULL REFERENCES version (id),
    service_id INTEGER NOT NULL REFERENCES service (id),
    PRIMARY KEY (version_id, service_id)
);

CREATE TABLE displayname (
    version_id INTEGER NOT NULL REFERENCES version (id),
    language_id INTEGER NOT NULL REFERENCES language (id),
    displayname VARCHAR(50) NOT NULL,
    PRIMARY KEY (version_id, language_id)
);

-- size is one of 72, 120, 256 (an enum in spkrepo; a string here, for portability).
CREATE TABLE icon (
    id INTEGER PRIMARY KEY,
    version_id INTEGER NOT NULL REFERENCES version (id),
    size VARCHAR(3) NOT NULL,
    path VARCHAR(100) NOT NULL
);

-- One .spk file: a version built for some architectures, from firmware_min up to firmware_max
-- (none: no upper bound).
CREATE TABLE build (
    id INTEGER PRIMARY KEY,
    version_id INTEGER NOT NULL REFERENCES version (id),
    firmware_min_id INTEGER NOT NULL REFERENCES firmware (id),
    firmware_max_id INTEGER REFERENCES firmware (id),
    path VARCHAR(200) NOT NULL,
    changelog TEXT,
    md5 VARCHAR(32),
    size INTEGER,
    active BOOLEAN NOT NULL
);

CREATE TABLE build_architecture (
    build_id INTEGER NOT NULL REFERENCES build (id),
    architecture_id INTEGER NOT NULL REFERENCES architecture (id),
    PRIMARY KEY (build_id, architecture_id)
);

CREATE TABLE build_description (
    build_id INTEGER NOT NULL REFERENCES build (id),
    language_id INTEGER NOT NULL REFERENCES language (id),
    description TEXT NOT NULL,
    PRIMARY KEY (build_id, language_id)
);

-- The catalog query walks architecture -> build_architecture -> build -> version; the rest are
-- the foreign keys it joins on.
CREATE INDEX ix_build_architecture_architecture ON build_architecture (architecture_id, build_id);
CREATE INDEX ix_build_version ON build (version_id);
CREATE INDEX ix_build_firmware_min ON build (firmware_min_id);
CREATE INDEX ix_version_package ON version (package_id, version);
CREATE INDEX ix_icon_version ON icon (version_id);
CREATE INDEX ix_screenshot_package ON screenshot (package_id);
CREATE INDEX ix_firmware_type_build ON firmware (type, build);
