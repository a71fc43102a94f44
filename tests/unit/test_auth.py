"""Handshake access rules: tokens in every accepted place, browser origins, when auth is on."""

from __future__ import annotations

import pytest
from websockets.datastructures import Headers

from voiceagent.config import ServerConfig
from voiceagent.transports.auth import Access, access_for, is_loopback

ACCESS = Access(("s3cret", "other"), ("https://app.example.com",))


def status(path: str, **headers: str) -> int | None:
    refusal = ACCESS.check(path, Headers({k.replace("_", "-"): v for k, v in headers.items()}))
    return None if refusal is None else refusal.status


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/realtime", {"Authorization": "Bearer s3cret"}),
        ("/v1/realtime", {"Authorization": "bearer other"}),
        ("/v1/realtime", {"Sec-WebSocket-Protocol": "realtime, openai-insecure-api-key.s3cret"}),
        ("/v1/realtime?voiceagent_metrics=1&token=s3cret", {}),
        ("/twilio/s3cret", {}),
        ("/twilio/twiml?token=s3cret", {}),
    ],
)
def test_a_token_is_accepted_from_the_header_the_subprotocol_the_query_and_the_twilio_path(path: str, headers: dict[str, str]) -> None:
    assert status(path, **headers) is None


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/realtime", {}),
        ("/v1/realtime", {"Authorization": "Bearer wrong"}),
        ("/v1/realtime", {"Authorization": "Basic s3cret"}),
        ("/v1/realtime", {"Sec-WebSocket-Protocol": "realtime, openai-insecure-api-key.s3cre"}),
        ("/v1/realtime?token=", {}),
        ("/twilio/twiml", {}),  # "twiml" is a route, not a token
        ("/twilio", {}),
    ],
)
def test_a_missing_or_wrong_token_is_401(path: str, headers: dict[str, str]) -> None:
    assert status(path, **headers) == 401


def test_a_foreign_browser_origin_is_403_even_with_a_token_and_the_own_origin_or_an_allowed_one_passes() -> None:
    auth = {"Authorization": "Bearer s3cret"}
    assert status("/v1/realtime", Origin="https://evil.example", Host="voice.example:8765", **auth) == 403
    assert status("/v1/realtime", Origin="http://voice.example:8765", Host="voice.example:8765", **auth) is None
    assert status("/v1/realtime", Origin="https://app.example.com", Host="voice.example:8765", **auth) is None
    assert status("/v1/realtime", Origin="null", Host="voice.example:8765", **auth) == 403
    assert Access((), ("*",)).check("/v1/realtime", Headers({"Origin": "https://any.example", "Host": "h"})) is None
    # without auth the origin rule still holds: a web page must not reach a server on localhost
    assert Access(()).check("/v1/realtime", Headers({"Origin": "https://evil.example", "Host": "127.0.0.1:8765"})) is not None


def test_auth_is_on_for_a_public_address_or_configured_tokens_and_off_on_loopback_unless_forced() -> None:
    assert not access_for(ServerConfig()).required
    public = access_for(ServerConfig(host="0.0.0.0"))
    assert public.required and public.generated and len(public.tokens[0]) >= 20
    assert access_for(ServerConfig(host="0.0.0.0")).tokens != public.tokens  # generated per run
    assert access_for(ServerConfig(auth_tokens="a, b")).tokens == ("a", "b")
    assert not access_for(ServerConfig(host="0.0.0.0", auth="off")).required
    assert access_for(ServerConfig(auth="on")).generated
    assert [is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.1", "example.com")] == [
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
