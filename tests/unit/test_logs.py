"""The JSON log format: one object per line; a JSON message (the turn line) is merged, not quoted."""

from __future__ import annotations

import json
import logging

from voiceagent.observability.logs import JsonFormatter


def record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("voiceagent.session", logging.INFO, __file__, 1, msg, None, None)


def test_a_plain_message_is_one_json_object() -> None:
    out = json.loads(JsonFormatter().format(record("session sess_1 opened")))
    assert (out["level"], out["logger"], out["message"]) == ("info", "voiceagent.session", "session sess_1 opened")
    assert out["time"].endswith("Z")


def test_a_json_message_is_merged_so_its_fields_are_searchable() -> None:
    line = JsonFormatter().format(record(json.dumps({"event": "turn", "spans_ms": {"first_audio_sent": 612.0}})))
    out = json.loads(line)
    assert out["event"] == "turn" and out["spans_ms"]["first_audio_sent"] == 612.0
    assert "message" not in out and "\n" not in line
