"""The package catalog of seed 004: spkrepo's ``/nas/`` endpoint on SQLite, PostgreSQL or MariaDB.

See README.md in this folder. Modules: `db` (connections and the query
counter), `data` (the seeded generator), `catalog` (the contract, the SQL and
the JSON, shared by every front end), `rush_app`, `flask_app` and
`fastapi_app` (the front ends), `dbservers` (throwaway PostgreSQL and MariaDB
servers for tests and benchmarks) and `__main__` (``python -m
examples.catalog build|serve``).
"""
