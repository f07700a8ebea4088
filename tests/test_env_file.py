"""``--env-file``'s ``${VAR}`` expansion, against python-dotenv itself: one
file of many cases is loaded by ``dotenv.load_dotenv`` (which keeps the
variables already in the environment, as rush does) and by rush, under the
same environment, and the app's environment must hold the same values.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from support import GUARD_TIMEOUT, ServerFactory, clean_environment

CASES = r"""
# expansion from earlier lines and from the environment
PLAIN=value
export EXPORTED=exp
REF=${PLAIN}
REF_TWICE=${PLAIN}-${EXPORTED}
FROM_ENV=${PRESET}
OVERRIDDEN=file-value
ENV_BEATS_FILE=${OVERRIDDEN}
LATER=${DEFINED_LATER}
DEFINED_LATER=now
CHAIN=${REF}/${DEFAULT}
SELF=${SELF:-self-default}
# defaults
DEFAULT=${UNSET_NAME:-fallback}
DEFAULT_EMPTY=${UNSET_NAME:-}
EMPTY_SET_WINS=${EMPTYSET:-not-used}
NESTED_DEFAULT=${UNSET_NAME:-${PLAIN}}
WEIRD_DEFAULT=${UNSET_NAME:-a:-b}
URL=postgres://${DB_USER:-app}:${DB_PASS}@localhost/${PLAIN}?sslmode=${SSLMODE:-require}
UNSET_PLAIN=${UNSET_NAME}
# what is not expanded
NO_BRACES=$PLAIN
UNCLOSED=${PLAIN
COLON_NAME=${PLAIN:x}
DOLLAR_ONLY=$
EMPTY_NAME=${}
# quoting, comments and escapes around references
DOUBLE="${PLAIN} in double quotes"
SINGLE='${PLAIN} in single quotes'
SINGLE_ESCAPE='it\'s ${PLAIN}'
COMMENTED=${PLAIN} # a comment
QUOTED_COMMENT="${PLAIN}"   # a comment
ESCAPES="a\tb\\n${PLAIN}\"q\""
SPACES=   ${PLAIN}
HASH_INSIDE=${PLAIN}#not-a-comment
FROM_ENV_DEFAULT=${PRESET:-unused}
"""
# (Trailing blanks, which an editor would strip from the text above.)
CASES += "TRAILING_BLANKS=${PLAIN}   \t\n"

ENVIRONMENT = {"PRESET": "from-env", "EMPTYSET": "", "OVERRIDDEN": "env-value", "DB_PASS": "s3cret"}


def file_keys(text: str) -> list[str]:
    keys = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            keys.append(line.removeprefix("export ").split("=", 1)[0])
    return keys


def test_env_file_expands_variables_as_python_dotenv_does(rush_server: ServerFactory, tmp_path: Path) -> None:
    env_file = tmp_path / "cases.env"
    env_file.write_text(CASES)
    environment = clean_environment(ENVIRONMENT)
    oracle = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dotenv, json, os, sys; dotenv.load_dotenv(sys.argv[1], override=False); "
            "print(json.dumps(dict(os.environ)))",
            str(env_file),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=GUARD_TIMEOUT,
        env=environment,
    )
    expected = json.loads(oracle.stdout)
    server = rush_server("environment", "--env-file", env_file, env=environment)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=GUARD_TIMEOUT) as client:
        served = client.get("/").json()
    keys = file_keys(CASES)
    assert len(keys) > 30
    assert {key: served.get(key) for key in keys} == {key: expected.get(key) for key in keys}
    # A few answers spelled out, so that the comparison cannot pass with both sides empty.
    assert served["REF_TWICE"] == "value-exp"
    assert served["ENV_BEATS_FILE"] == "env-value"
    assert served["URL"] == "postgres://app:s3cret@localhost/value?sslmode=require"
    assert served["EMPTY_SET_WINS"] == ""


def test_env_file_expansion_reaches_rush_options(rush_server: ServerFactory, tmp_path: Path) -> None:
    """The file's RUSH_* variables are options, expanded too: RUSH_WORKERS from a default."""
    env_file = tmp_path / "options.env"
    env_file.write_text("RUSH_WORKERS=${WORKER_COUNT:-2}\n")
    server = rush_server("basic", "--env-file", env_file)
    server.wait_for_workers(2)
