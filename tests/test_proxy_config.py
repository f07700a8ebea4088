"""`rush proxy` options: parsed from flags and ``RUSH_*`` variables, refused before binding."""

from __future__ import annotations

import subprocess

import pytest
from rush.config import OptionError
from rush.proxy import ProxyConfig
from support import RUSH, clean_environment


def test_defaults_are_the_secure_ones() -> None:
    config = ProxyConfig.from_sources({}, {})
    assert (config.host, config.port) == ("127.0.0.1", 8888)
    assert not config.allow_private and not config.allow_connect_port and not config.allow_client
    assert config.access_log and config.upstream_timeout == 60.0


def test_lists_come_from_repeated_flags_or_comma_separated_variables() -> None:
    environment = {
        "RUSH_ALLOW_CONNECT_PORT": "8443, 9443",
        "RUSH_ALLOW_CLIENT": "10.0.0.0/8",
        "RUSH_ALLOW_PRIVATE": "1",
    }
    config = ProxyConfig.from_sources({}, environment)
    assert config.allow_connect_port == [8443, 9443]
    assert config.allow_client == ["10.0.0.0/8"]
    assert config.allow_private


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"allow_client": ["nonsense"]}, "--allow-client"),
        ({"allow_connect_port": [0]}, "--allow-connect-port"),
        ({"upstream_timeout": 0}, "--upstream-timeout"),
        ({"auth": ["no-password"]}, "--auth"),
        ({"auth_file": "/nonexistent/htpasswd"}, "--auth-file"),
        ({"policy": "not callable"}, "--policy"),
        ({"uds": "/tmp/proxy.sock"}, "--uds"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(options: dict, flag: str) -> None:
    with pytest.raises(OptionError, match=flag):
        ProxyConfig.from_sources(options, {})


def test_listening_beyond_loopback_needs_a_rule_about_clients(tmp_path) -> None:
    with pytest.raises(OptionError, match="open proxy"):
        ProxyConfig.from_sources({"host": "0.0.0.0"}, {})
    with pytest.raises(OptionError, match="open proxy"):
        ProxyConfig.from_sources({"host": "::"}, {})
    for allowed in ({"allow_client": ["10.0.0.0/8"]}, {"auth": ["user:password"]}, {"policy": lambda *args: True}):
        assert ProxyConfig.from_sources({"host": "0.0.0.0", **allowed}, {}).host == "0.0.0.0"
    assert ProxyConfig.from_sources({"host": "::1"}, {}).host == "::1"
    assert ProxyConfig.from_sources({"host": "localhost"}, {}).host == "localhost"


def test_the_cli_reports_a_refused_value_on_one_line() -> None:
    completed = subprocess.run(
        [str(RUSH), "proxy", "--host", "0.0.0.0"], capture_output=True, text=True, env=clean_environment(), timeout=30
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith("rush: error: --host would make an open proxy")
    assert completed.stderr.count("\n") == 1
