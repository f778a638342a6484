"""Console settings: keys, files, variables, flags' precedence, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response

from tidemq.console.auth import set_session_cookie
from tidemq.console.config import ConsoleConfig, load_console_config
from tidemq.console.sessions import SessionStore
from tidemq.console.users import ConsoleUser, Role
from tidemq.errors import ConfigError


def test_keys_from_a_file_the_environment_and_overrides(tmp_path: Path) -> None:
    props = tmp_path / "console.properties"
    props.write_text("consoleUsersFile=/etc/u.yml\nconsoleSessionTimeout=600\n"
                     "consoleAllowedHosts=console.example, ops.example\nbogusKey=1\n")
    config, unknown = load_console_config(
        props, overrides={"consoleSessionTimeout": "900"},
        env={"TIDEMQ_CONSOLELOGINATTEMPTS": "9", "TIDEMQ_METRICSAUTHTOKEN": "t"})
    assert unknown == ["bogusKey"]
    assert config.users_file == "/etc/u.yml" and config.session_timeout == 900
    assert config.login_attempts == 9 and config.metrics_auth_token == "t"
    assert config.host_names == ["console.example", "ops.example"]
    assert ConsoleConfig().session_timeout == 3600 and ConsoleConfig().session_max_age == 43200


@pytest.mark.parametrize(("values", "key"), [
    ({"consoleSessionTimeout": "0"}, "consoleSessionTimeout"),
    ({"consoleLoginAttempts": "-1"}, "consoleLoginAttempts"),
    ({"metricsAuthUser": "prom"}, "metricsAuthPassword"),
    ({"consoleAllowAnonymous": "perhaps"}, "consoleAllowAnonymous"),
    ({"consoleSampleInterval": "0"}, "consoleSampleInterval"),
    ({"consoleSampleInterval": "120", "consoleHistorySeconds": "60"}, "consoleSampleInterval"),
])
def test_bad_values_name_their_key(values: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_console_config(overrides=values, env={})
    assert info.value.key == key


@pytest.mark.parametrize(("scheme", "secure"), [("http", False), ("https", True)])
def test_the_session_cookie_is_secure_over_https(scheme: str, secure: bool) -> None:
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": [],
                       "query_string": b"", "scheme": scheme, "server": ("h", 1)})
    response = Response()
    set_session_cookie(response, request, SessionStore().open(ConsoleUser("a", Role.ADMIN)))
    header = response.headers["set-cookie"].lower()
    assert "httponly" in header and "samesite=strict" in header and "path=/" in header
    assert ("; secure" in header) == secure
