"""The body of ``POST /v1/live/sessions`` for WebRTC: the session and the SDP offer, or a refusal
that names the parameter (the SIP variant's refusals are in test_live_outbound.py)."""

from __future__ import annotations

import json

import pytest

from voiceagent.errors import ProtocolError
from voiceagent.transports.live_webrtc import live_offer

SESSION = {"type": "live", "model": "gpt-live-1"}


def test_a_good_offer_gives_the_session_and_the_sdp() -> None:
    session, sdp = live_offer(json.dumps({"session": SESSION, "transport": {"type": "webrtc", "sdp": "v=0"}}).encode())
    assert session == SESSION and sdp == "v=0"


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"{not json", "invalid_json", None),
        (b"[]", "invalid_type", None),
        (json.dumps({"session": SESSION, "transport": {"type": "webrtc", "sdp": "v=0"}, "x": 1}).encode(), "unknown_parameter", "x"),
        (json.dumps({"session": SESSION}).encode(), "invalid_value", "transport"),
        (json.dumps({"session": SESSION, "transport": {"type": "sip", "sdp": "v=0"}}).encode(), "invalid_value", "transport"),
        (json.dumps({"session": SESSION, "transport": {"type": "webrtc"}}).encode(), "invalid_value", "transport"),
        (json.dumps({"transport": {"type": "webrtc", "sdp": "v=0"}}).encode(), "missing_required_parameter", "session"),
        (json.dumps({"session": "live", "transport": {"type": "webrtc", "sdp": "v=0"}}).encode(), "invalid_type", "session"),
    ],
)
def test_a_bad_body_is_refused_naming_what_is_wrong(body: bytes, code: str, param: str | None) -> None:
    with pytest.raises(ProtocolError) as err:
        live_offer(body)
    assert (err.value.code, err.value.param) == (code, param)
