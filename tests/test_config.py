"""Option validation: every bad value (timeouts that are infinite, NaN, zero,
negative or past a day; sizes that are not sizes or do not fit 63 bits;
worker counts past the cap; ports, backlog, counts) is refused before anything
is bound or forked, on one line naming the flag (and the RUSH_* variable it
came from), with exit status 2 from the command line and a ValueError with the
same text from `rush.run`.

Most cases call the CLI's ``main`` in this process, with serving replaced by a
failure (nothing may be bound or forked); a few run the real ``rush`` command.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import rush
import rush.cli
import rush.main
from rush.config import WORKERS_HARD_LIMIT, Config, parse_size, worker_cap
from rush.values import format_size
from support import run_rush

APP = "tests.apps.basic:app"

TIMEOUTS = ["keep-alive-timeout", "header-timeout", "body-timeout", "send-timeout"]
BAD_TIMEOUTS = ["inf", "-inf", "nan", "0", "-1", "1e19", "86401"]
SIZES = ["max-body-size", "max-request-line", "max-head-size"]
BAD_SIZES = ["1e400M", "-5", "abc", "", "0", "8E", "9999999999G", "nanK"]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """Runs ``rush.cli.main(args)`` in this process with the given RUSH_*
    variables; returns (exit status, stderr lines). Serving fails the test."""

    def refuse_to_serve(config: Config) -> int:
        raise AssertionError(f"rush would have started serving with {config!r}")

    monkeypatch.setattr(rush.cli, "serve", refuse_to_serve)
    for name in list(os.environ):
        if name.startswith("RUSH_"):
            monkeypatch.delenv(name)

    def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        try:
            code = rush.cli.main([APP, *args])
        finally:
            for name in env or {}:
                monkeypatch.delenv(name)
        captured = capsys.readouterr()
        assert captured.out == ""
        return code, captured.err.splitlines()

    return run


def assert_refused(cli: Any, flag: str, value: str, problem: str, via: str) -> None:
    """``--flag value`` (or its RUSH_* variable) exits 2 with one line naming it."""
    variable = "RUSH_" + flag.upper().replace("-", "_")
    if via == "flag":
        code, lines = cli(f"--{flag}={value}")
        where = f"--{flag}"
    else:
        code, lines = cli(env={variable: value})
        where = f"--{flag} (from {variable})"
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"rush: error: {where} {problem}"), lines
    assert " (got " in lines[0] and lines[0].endswith(")"), lines


@pytest.mark.parametrize("via", ["flag", "env"])
@pytest.mark.parametrize("value", BAD_TIMEOUTS)
@pytest.mark.parametrize("flag", TIMEOUTS)
def test_bad_timeouts_are_refused(cli: Any, flag: str, value: str, via: str) -> None:
    assert_refused(cli, flag, value, "must be a finite number of seconds between 0 and 86400", via)


@pytest.mark.parametrize("via", ["flag", "env"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e19", "86401"])
def test_bad_graceful_timeouts_are_refused(cli: Any, value: str, via: str) -> None:
    assert_refused(cli, "graceful-timeout", value, "must be a finite number of seconds from 0 to 86400", via)


@pytest.mark.parametrize("via", ["flag", "env"])
@pytest.mark.parametrize("value", BAD_SIZES)
@pytest.mark.parametrize("flag", SIZES)
def test_bad_sizes_are_refused(cli: Any, flag: str, value: str, via: str) -> None:
    if (flag, value) == ("max-body-size", "0"):
        pytest.skip("--max-body-size 0 means no limit (test_a_body_size_of_zero_is_no_limit)")
    assert_refused(cli, flag, value, "must be", via)


def test_a_body_size_of_zero_is_no_limit(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """nginx's ``client_max_body_size 0``; the worker passes the core the largest size."""
    served: list[Config] = []
    monkeypatch.setattr(rush.cli, "serve", lambda config: served.append(config) or 0)
    assert cli("--max-body-size", "0") == (0, [])
    assert cli(env={"RUSH_MAX_BODY_SIZE": "0"}) == (0, [])
    assert [config.max_body_size for config in served] == [0, 0]


@pytest.mark.parametrize("via", ["flag", "env"])
@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("workers", "0"),
        ("workers", "-1"),
        ("workers", str(worker_cap() + 1)),
        ("workers", "99999999999999999999999"),
        ("workers", "many"),
        ("workers", "1.5"),
        ("port", "-1"),
        ("port", "65536"),
        ("port", "http"),
        ("backlog", "0"),
        ("backlog", "-1"),
        ("max-connections", "0"),
        ("max-headers", "0"),
        ("max-headers", "10001"),
        ("threads", "-1"),
        ("fd", "-1"),
        ("log-level", "chatty"),
        ("interface", "cgi"),
    ],
)
def test_other_bad_values_are_refused(cli: Any, flag: str, value: str, via: str) -> None:
    assert_refused(cli, flag, value, "must be", via)


def test_a_bad_boolean_variable_is_refused(cli: Any) -> None:
    assert_refused(cli, "access-log", "maybe", "must be true or false", "env")


def test_the_worker_cap_message_says_how_to_lift_it(cli: Any) -> None:
    code, lines = cli("--workers", "99999999999999999999999")
    assert code == 2
    assert lines == [
        f"rush: error: --workers must be between 1 and {worker_cap()} on this machine "
        "(4 per CPU, at least 32, at most 512); --allow-many-workers (RUSH_ALLOW_MANY_WORKERS=1) "
        f"raises the limit to {WORKERS_HARD_LIMIT} (got 99999999999999999999999)"
    ]


def test_worker_cap() -> None:
    assert worker_cap() == min(max(4 * (os.cpu_count() or 1), 32), 512)


def test_many_workers_are_accepted_with_the_override() -> None:
    """Validation only: nothing is forked."""
    config = Config.from_sources({"app": APP, "workers": 600, "allow_many_workers": True}, {})
    assert config.workers == 600
    config = Config.from_sources({"app": APP}, {"RUSH_WORKERS": "600", "RUSH_ALLOW_MANY_WORKERS": "1"})
    assert config.workers == 600
    with pytest.raises(ValueError, match=f"--workers must be between 1 and {WORKERS_HARD_LIMIT} "):
        Config.from_sources({"app": APP, "workers": WORKERS_HARD_LIMIT + 1, "allow_many_workers": True}, {})


def test_the_override_flag_reaches_validation(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Config] = []
    monkeypatch.setattr(rush.cli, "serve", lambda config: served.append(config) or 0)
    assert cli("--workers", "600", "--allow-many-workers") == (0, [])
    assert [(config.workers, config.allow_many_workers) for config in served] == [(600, True)]


@pytest.mark.parametrize(
    ("text", "size"),
    [("16M", 16 * 1024**2), ("16MiB", 16 * 1024**2), ("16mb", 16 * 1024**2), ("1.5K", 1536), ("100", 100)],
)
def test_sizes_that_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("size", "text"), [(16 * 1024**2, "16M"), (4 * 1024**3, "4G"), (16384, "16K"), (1536, "1536"), (0, "0")]
)
def test_sizes_print_as_they_parse(size: int, text: str) -> None:
    assert format_size(size) == text
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"keep_alive_timeout": float("inf")},
            "--keep-alive-timeout must be a finite number of seconds between 0 and 86400 (got inf)",
        ),
        ({"graceful_timeout": float("nan")}, "--graceful-timeout must be a finite number of seconds from 0 to 86400"),
        ({"header_timeout": 0}, "--header-timeout must be a finite number of seconds between 0 and 86400 (got 0)"),
        ({"max_body_size": 2**63}, "--max-body-size must be between 0 and 9223372036854775807"),
        ({"workers": 10**30}, "--workers must be between 1 and "),
        ({"workers": "4"}, "--workers must be a whole number (got '4')"),
        ({"backlog": 0}, "--backlog must be between 1 and "),
    ],
)
def test_rush_run_raises_value_error_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], message: str
) -> None:
    def refuse_to_listen(config: Config) -> None:
        raise AssertionError("rush.run would have bound a socket")

    monkeypatch.setattr(rush.main, "open_listeners", refuse_to_listen)
    with pytest.raises(ValueError) as refused:
        rush.run(APP, **options)
    assert str(refused.value).startswith(message)


def test_rush_run_names_its_own_option_for_a_uvicorn_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rush.run(app, timeout_keep_alive=5)``, as ``uvicorn.run`` takes it: the error says what
    rush calls it."""
    monkeypatch.setattr(rush.main, "open_listeners", lambda config: pytest.fail("rush.run would have bound"))
    with pytest.raises(TypeError) as refused:
        rush.run(APP, timeout_keep_alive=5, loop="uvloop")
    assert str(refused.value) == (
        "unknown option(s): loop, timeout_keep_alive (uvicorn's name; rush's is keep_alive_timeout)"
    )


# ---------------------------------------------------------------------------
# The real command


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ["--keep-alive-timeout", "inf"],
            {},
            "rush: error: --keep-alive-timeout must be a finite number of seconds between 0 and 86400 (got inf)",
        ),
        (
            [],
            {"RUSH_WORKERS": "99999999999999999999999"},
            "rush: error: --workers (from RUSH_WORKERS) must be between 1 and ",
        ),
        (
            ["--max-body-size", "1e400M"],
            {},
            "rush: error: --max-body-size must be a size in bytes such as 16M, 64K or 1048576 (got '1e400M')",
        ),
    ],
)
def test_the_rush_command_exits_2_with_one_line(args: list[str], env: dict[str, str], line: str) -> None:
    result = run_rush(APP, *args, env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(line)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""
