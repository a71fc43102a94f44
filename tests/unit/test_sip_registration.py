"""``server.sip_register`` read and described (voiceagent/sip/registration.py)."""

from __future__ import annotations

import pytest

from voiceagent.config.load import load_config
from voiceagent.errors import ConfigError
from voiceagent.sip.registration import PASSWORD_ENV, REGISTERED, parse_register
from voiceagent.sip.registration import describe as describe_registration
from voiceagent.sip.supervisor import SipGatewayError, check_registration


def test_an_account_is_read_with_its_registrar_and_digest_user() -> None:
    reg = parse_register("sip:1001@pbx.example.com:5080")
    assert (reg.user, reg.host, reg.port, reg.registrar) == ("1001", "pbx.example.com", 5080, "sip:pbx.example.com:5080")
    assert parse_register("sip:1001@10.0.0.5", auth_user="trunk-auth").user == "trunk-auth"
    assert parse_register("sip:1001@10.0.0.5").registrar == "sip:10.0.0.5"
    assert parse_register("sip:1001@127.0.0.1").addresses() == ["127.0.0.1"]


@pytest.mark.parametrize("uri", ["1001@pbx", "sip:pbx.example.com", "sip:1001@", "sip:1001@pbx:99999", "http://x@y"])
def test_an_account_that_is_no_sip_uri_is_refused(uri: str) -> None:
    with pytest.raises(ValueError):
        parse_register(uri)


def test_the_outcome_lines() -> None:
    assert describe_registration(200, "OK", 300, "sip:pbx").startswith(f"{REGISTERED} at sip:pbx (200 OK, for 300 s)")
    assert "failed: 403 Forbidden" in describe_registration(403, "Forbidden", 0, "sip:pbx")
    assert "unregistered" in describe_registration(200, "OK", 0, "sip:pbx")


def test_the_config_checks_the_account() -> None:
    with pytest.raises(ConfigError, match=r"server\.sip_register"):
        load_config(env={}, overrides={"server.sip_register": "pbx.example.com"})
    cfg = load_config(env={}, overrides={"server.sip_register": "sip:1001@pbx.example.com", "server.sip_auth_user": "a1"})
    assert cfg.server.sip_register == "sip:1001@pbx.example.com" and cfg.server.sip_auth_user == "a1"


def test_serve_asks_for_the_password_before_anything_loads() -> None:
    check_registration("", {})  # no registration: nothing asked
    check_registration("sip:1001@pbx", {PASSWORD_ENV: "x"})
    with pytest.raises(SipGatewayError, match=PASSWORD_ENV):
        check_registration("sip:1001@pbx", {})
