"""``session.tracing``: decoded from ``session.update``, echoed in the session object, and carried
into the per-turn log line (the OpenTelemetry span's attributes: tests/integration/test_observability.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from voiceagent.config import Config
from voiceagent.conversation.reply import Reply
from voiceagent.conversation.report import turn_record
from voiceagent.errors import ProtocolError
from voiceagent.events import ResponseStatus
from voiceagent.settings import Tracing, settings_from_config
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import UpdateSession
from voiceagent.transports.realtime_settings import session_object


def update(tracing: Any) -> UpdateSession:
    codec = RealtimeCodec(settings_from_config(Config()), 22_050)
    cmd = codec.decode(json.dumps({"type": "session.update", "session": {"type": "realtime", "tracing": tracing}}))
    assert isinstance(cmd, UpdateSession)
    return cmd


def test_auto_a_configuration_and_null_are_taken_as_given() -> None:
    assert update("auto").changes["tracing"] == Tracing()
    given = update({"workflow_name": "support", "group_id": "g1", "metadata": {"caller": "42", "vip": True, "n": 3}})
    assert given.changes["tracing"] == Tracing(
        auto=False, workflow_name="support", group_id="g1", metadata=(("caller", "42"), ("vip", "true"), ("n", "3"))
    )
    assert update({}).changes["tracing"] == Tracing(auto=False)
    assert update(None).changes["tracing"] is None
    assert given.refused == ()


@pytest.mark.parametrize(
    ("tracing", "code", "param"),
    [
        ("on", "invalid_value", "session.tracing"),
        (3, "invalid_value", "session.tracing"),
        ({"workflow_name": 7}, "invalid_value", "session.tracing.workflow_name"),
        ({"group_id": "x" * 513}, "invalid_value", "session.tracing.group_id"),
        ({"metadata": ["a"]}, "invalid_value", "session.tracing.metadata"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "invalid_value", "session.tracing.metadata"),
        ({"metadata": {"k" * 65: "v"}}, "invalid_value", "session.tracing.metadata"),
        ({"metadata": {"k": "v" * 513}}, "invalid_value", "session.tracing.metadata"),
        ({"workflow": "typo"}, "unknown_parameter", "session.tracing.workflow"),
    ],
)
def test_a_bad_tracing_value_is_refused_by_name(tracing: Any, code: str, param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        update(tracing)
    assert (info.value.code, info.value.param) == (code, param)


def test_the_session_object_echoes_the_tracing_the_client_set() -> None:
    settings = settings_from_config(Config())
    assert session_object(settings, WireAudio(22_050))["tracing"] is None
    auto = session_object(settings.__class__(**{**settings.__dict__, "tracing": Tracing()}), WireAudio(22_050))
    assert auto["tracing"] == "auto"
    named = Tracing(auto=False, workflow_name="w", group_id=None, metadata=(("k", "v"),))
    obj = session_object(settings.__class__(**{**settings.__dict__, "tracing": named}), WireAudio(22_050))
    assert obj["tracing"] == {"workflow_name": "w", "group_id": None, "metadata": {"k": "v"}}


def test_the_turn_log_line_carries_the_tracing_labels_and_the_span_attributes_are_flat() -> None:
    named = Tracing(auto=False, workflow_name="w", group_id="g", metadata=(("k", "v"),))
    args = (Config(), "sess_1", "joe", Reply(1), ResponseStatus.COMPLETED, None, {}, None, 1)
    assert "tracing" not in turn_record(*args)
    assert turn_record(*args, named)["tracing"] == {"auto": False, "workflow_name": "w", "group_id": "g", "metadata": {"k": "v"}}
    assert named.attributes() == {
        "tracing": "configured",
        "tracing.workflow_name": "w",
        "tracing.group_id": "g",
        "tracing.metadata.k": "v",
    }
    assert Tracing().attributes() == {"tracing": "auto"}
