"""Seeded hostile and valid ``/v1/realtime`` messages, by category, each with what the server owes it."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.fuzz.frames import RAW, b64, edge_depth, pcm_b64, raw
from voiceagent.transports.realtime_wire import WIRE_RATE

KNOWN_TYPES = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "conversation.item.delete",
    "conversation.item.retrieve",
    "response.create",
    "response.cancel",
)


@dataclass
class Msg:
    """One frame a hostile Realtime client sends, and what the server owes it."""

    category: str
    frame: str | bytes
    bad: bool  # the server must answer it with an ``error`` event
    event_id: str | None = None  # the event_id the error must echo (None: the message has none the server can read)


class RealtimeGen:
    """Seeded hostile and valid Realtime messages for one connection, aware of its state."""

    def __init__(self, rng: random.Random, prefix: str) -> None:
        self.rng = rng
        self.prefix = prefix
        self.n = 0
        self.vad_on = True
        self.ms_since_commit = 0.0  # audio appended since the last commit or clear

    def eid(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n}"

    def junk(self, n: int) -> str:
        return "".join(self.rng.choice('{}[]":,\\ abcxyz0123456789-.eE\n\ttrufalsn') for _ in range(n))

    def valid_obj(self) -> dict[str, Any]:
        """A well-formed message (to cut, or to send whole)."""
        r = self.rng
        choice = r.randrange(7)
        if choice == 0:
            return {"type": "input_audio_buffer.append", "event_id": self.eid(), "audio": pcm_b64(r.choice((240, 480, 960)), r)}
        if choice == 1:
            return {"type": "session.update", "event_id": self.eid(), "session": {"type": "realtime", "instructions": "Be brief."}}
        if choice == 2:
            return {"type": "input_audio_buffer.clear", "event_id": self.eid()}
        if choice == 3:
            item = {"type": "message", "role": r.choice(("user", "assistant")), "content": [{"type": "input_text", "text": "a note"}]}
            return {"type": "conversation.item.create", "event_id": self.eid(), "item": item}
        if choice == 4:
            return {"type": "session.update", "event_id": self.eid(), "session": {"audio": {"output": {"speed": 1.1, "voice": "joe"}}}}
        if choice == 5:
            td = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
            return {"type": "session.update", "event_id": self.eid(), "session": {"audio": {"input": {"turn_detection": td}}}}
        return {"type": "conversation.item.truncate", "event_id": self.eid(), "item_id": "item_x", "content_index": 0, "audio_end_ms": 5}

    def valid(self) -> Msg:
        """A message the server must accept, applied to the tracked state."""
        r = self.rng
        choice = r.randrange(6)
        eid = self.eid()
        if choice <= 1:
            samples = r.choice((240, 480, 960))
            self.ms_since_commit += samples * 1000 / WIRE_RATE
            return Msg(
                "valid", json.dumps({"type": "input_audio_buffer.append", "event_id": eid, "audio": pcm_b64(samples, r)}), False, eid
            )
        if choice == 2:
            self.ms_since_commit = 0.0
            return Msg("valid", json.dumps({"type": "input_audio_buffer.clear", "event_id": eid}), False, eid)
        if choice == 3:
            item = {"type": "message", "role": r.choice(("user", "assistant")), "content": [{"type": "input_text", "text": "a note"}]}
            return Msg("valid", json.dumps({"type": "conversation.item.create", "event_id": eid, "item": item}), False, eid)
        if choice == 4:
            self.vad_on = not self.vad_on
            td: dict[str, Any] | None = {"type": "server_vad", "silence_duration_ms": r.choice((300, 500))} if self.vad_on else None
            return Msg(
                "valid",
                json.dumps({"type": "session.update", "event_id": eid, "session": {"audio": {"input": {"turn_detection": td}}}}),
                False,
                eid,
            )
        if not self.vad_on and self.ms_since_commit >= 300:
            self.ms_since_commit = 0.0
            return Msg("valid", json.dumps({"type": "input_audio_buffer.commit", "event_id": eid}), False, eid)
        session = {
            "instructions": r.choice(("Be brief.", "Speak slowly.", "ü ✓ 日本")),
            "audio": {"output": {"speed": r.choice((0.8, 1.0, 1.5))}},
        }
        return Msg("valid", json.dumps({"type": "session.update", "event_id": eid, "session": session}), False, eid)

    def bad(self, category: str) -> Msg:
        frame, eid = getattr(self, f"_{category}")()
        return Msg(category, frame, True, eid)

    # Each generator returns (frame, the event_id the error must echo or None).

    def _malformed_json(self) -> tuple[str, None]:
        r = self.rng
        forms = [
            lambda: self.junk(r.randint(1, 80)),
            lambda: '{"type": "session.update", "session": {' + self.junk(r.randint(0, 30)),
            lambda: '{type: "response.create"}',
            lambda: "{'type': 'response.cancel'}",
            lambda: '{"type": "response.cancel",}',
            lambda: '{"type": "response.cancel"} trailing',
            lambda: '{"type": "response.cancel"}{"type": "response.cancel"}',
            lambda: "",
            lambda: " \n\t ",
            lambda: '{"type": "input_audio_buffer.append", "audio": "AAAA\x01"}',  # a raw control character in a string
            lambda: '{"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_text", "text": "\\x41"}]}}',
            lambda: '{"type": "response.create", "response": {"instructions": "unterminated}}',
            lambda: "\ufeff" + json.dumps({"type": "response.cancel"}),  # a byte-order mark
            lambda: '{"type": "session.update", "session": {"max_output_tokens": 01}}',
            lambda: '{"type": "session.update", "session": {"audio": {"output": {"speed": .5}}}}',
            lambda: '{"type": "response.cancel", "event_id": "x" "y"}',
        ]
        text = r.choice(forms)()
        try:
            parsed = json.loads(text)
        except ValueError:
            return text, None
        # The rare junk that happens to parse: make it an unterminated object instead.
        return "{" + json.dumps(parsed), None

    def _truncated_json(self) -> tuple[str, None]:
        text = json.dumps(self.valid_obj())
        cut = self.rng.randrange(len(text))  # a proper prefix of an object never closes it
        return text[:cut], None

    def _not_an_object(self) -> tuple[str, None]:
        return self.rng.choice(
            ('[{"type": "response.cancel"}]', '"response.cancel"', "42", "-0.5e3", "null", "true", "[]", '[1, {"type": "x"}]')
        ), None

    def _wrong_type(self) -> tuple[str, str]:
        r = self.rng
        eid = self.eid()
        td = "turn_detection"
        text = {"type": "input_text", "text": "x"}
        # Every value here is refused: the field holds the wrong JSON type.
        forms: list[Callable[[], dict[str, Any]]] = [
            lambda: {"type": r.choice((5, True, None, [], {}, 1.5))},
            lambda: {"type": "input_audio_buffer.append", "audio": r.choice((5, True, None, [], {}, 1.5))},
            lambda: {"type": "session.update", "session": r.choice((5, "realtime", [], True, 1.5))},
            lambda: {"type": "session.update", "session": {"instructions": r.choice((5, [], {}, True, None))}},
            lambda: {"type": "session.update", "session": {"audio": r.choice((5, "x", [], True))}},
            lambda: {"type": "session.update", "session": {"audio": {"input": r.choice((5, "x", [1]))}}},
            lambda: {"type": "session.update", "session": {"audio": {"output": r.choice((5, "x", [1]))}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {"format": r.choice((5, [], True, {"type": 5}, None))}}}},
            lambda: {"type": "session.update", "session": {"audio": {"output": {"format": r.choice((5, [], True, {"type": []}))}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {td: r.choice((5, "on", [], True))}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {td: {"threshold": r.choice(("0.5", True, [], {}, None))}}}}},
            lambda: {
                "type": "session.update",
                "session": {"audio": {"input": {td: {"silence_duration_ms": r.choice(("500", 500.5, True))}}}},
            },
            lambda: {"type": "session.update", "session": {"audio": {"input": {td: {"prefix_padding_ms": r.choice(("300", [], None))}}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {td: {"create_response": r.choice(("yes", 1, None))}}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {td: {"type": r.choice((5, [], {}))}}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {"transcription": {"language": r.choice((5, [], True))}}}}},
            lambda: {"type": "session.update", "session": {"audio": {"input": {"transcription": r.choice((5, "en", [], True))}}}},
            lambda: {"type": "session.update", "session": {"audio": {"output": {"voice": r.choice((5, [], {}, True, None))}}}},
            lambda: {"type": "session.update", "session": {"audio": {"output": {"speed": r.choice(("fast", True, [], None))}}}},
            lambda: {"type": "session.update", "session": {"max_output_tokens": r.choice(("10", 1.5, True, [], None))}},
            lambda: {"type": "conversation.item.create", "item": r.choice((5, "hi", [], True))},
            lambda: {"type": "conversation.item.create", "item": {"role": "user", "content": r.choice(("hi", {}, 5, None))}},
            lambda: {"type": "conversation.item.create", "item": {"role": "user", "content": [r.choice(("hi", 5, None, []))]}},
            lambda: {
                "type": "conversation.item.create",
                "item": {"role": "user", "content": [{**text, "text": r.choice((5, None, [], {}))}]},
            },
            lambda: {"type": "conversation.item.create", "item": {"role": r.choice((5, None, [], True)), "content": [text]}},
            lambda: {"type": "conversation.item.create", "item": {"type": r.choice((5, [], True)), "role": "user", "content": [text]}},
            lambda: {"type": "conversation.item.truncate", "item_id": r.choice((5, None, [], {})), "audio_end_ms": 10},
            lambda: {"type": "conversation.item.truncate", "item_id": "item_x", "audio_end_ms": r.choice(("10", True, None, [], {}))},
            lambda: {"type": "conversation.item.delete", "item_id": r.choice((5, None, [], {}, True))},
            lambda: {"type": "conversation.item.retrieve", "item_id": r.choice((5, None, [], {}, True))},
            lambda: {"type": "response.create", "response": r.choice((5, "x", [], True))},
            lambda: {"type": "response.create", "response": {"instructions": r.choice((5, [], {}, True))}},
            lambda: {"type": "response.cancel", "response_id": r.choice((5, [], {}, True))},
        ]
        return json.dumps({**r.choice(forms)(), "event_id": eid}), eid

    def _missing_field(self) -> tuple[str, str]:
        r = self.rng
        eid = self.eid()
        msg = r.choice(
            (
                {},
                {"session": {"instructions": "x"}},
                {"type": "input_audio_buffer.append"},
                {"type": "session.update"},
                {"type": "conversation.item.create"},
                {"type": "conversation.item.create", "item": {"type": "message", "content": [{"type": "input_text", "text": "x"}]}},
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user"}},
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text"}]}},
                {"type": "conversation.item.truncate", "item_id": "item_x"},
                {"type": "conversation.item.truncate", "audio_end_ms": 10},
                {"type": "conversation.item.delete"},
                {"type": "conversation.item.retrieve"},
            )
        )
        return json.dumps({**msg, "event_id": eid}), eid

    def _unknown_type(self) -> tuple[str, str]:
        r = self.rng
        eid = self.eid()
        kind = r.choice(
            (
                "response.Create",
                "session.updated",  # a server event
                "session.created",
                "error",
                "input_audio_buffer.append ",
                " response.create",
                "",
                "conversation.item.create.extra",
                "response.audio.delta",
                "transcription_session.update",
                "ping",
                "日本語",
                "a" * r.randint(200, 5000),
                "b" * r.randint(100_000, 300_000),  # a 200 KB type once drew a 2.4 MB error event
                r.choice(KNOWN_TYPES).upper(),
                "x" + self.junk(r.randint(1, 40)),
            )
        )
        return json.dumps({"type": kind, "event_id": eid}), eid

    def _huge_number(self) -> tuple[str, str | None]:
        r = self.rng
        eid = self.eid()
        if r.random() < 0.25:
            # More digits than Python converts to an int: not valid JSON for the server.
            return raw({"type": "response.cancel", "n": RAW, "event_id": eid}, "9" * r.randint(4301, 20000)), None
        huge = r.choice(("1e400", "-1e400", "1" + "0" * 400, "NaN", "Infinity", "-Infinity", "1e308", "123456789012345678901234567890"))
        td = "turn_detection"
        msg = r.choice(
            (
                {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": RAW},
                {"type": "session.update", "session": {"audio": {"output": {"speed": RAW}}}},
                {"type": "session.update", "session": {"max_output_tokens": RAW}},
                {"type": "session.update", "session": {"audio": {"input": {td: {"threshold": RAW}}}}},
                {"type": "session.update", "session": {"audio": {"input": {td: {"silence_duration_ms": RAW}}}}},
                {"type": "session.update", "session": {"audio": {"input": {td: {"prefix_padding_ms": RAW}}}}},
                {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": RAW}}}}},
                {"type": "response.cancel", "response_id": RAW},
                {"type": RAW},
            )
        )
        return raw({**msg, "event_id": eid}, huge), eid

    def _lone_surrogate(self) -> tuple[str, None]:
        r = self.rng
        s = json.dumps(r.choice(("\ud800", "\udfff", "\ud83d", "a\udc00b", "\ud83d\ud83d")))
        content = [{"type": "input_text", "text": RAW}]
        msg = r.choice(
            (
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content}},
                {"type": "session.update", "session": {"instructions": RAW}},
                {"type": RAW},
                {"type": "response.cancel", "event_id": RAW},
                {"type": "conversation.item.delete", "item_id": RAW},
                {"type": "session.update", "session": {"audio": {"output": {"voice": RAW}}}},
                {"type": "response.create", "response": {"instructions": RAW}},
                {"type": "input_audio_buffer.clear", "note": {"k": RAW}},
            )
        )
        return raw(msg, s), None

    def _deep_nesting(self) -> tuple[str, str | None]:
        r = self.rng
        eid = self.eid()
        choice = r.random()
        if choice < 0.35:
            depth = r.randint(2000, 100_000)  # past the parser's recursion limit
            open_, close = r.choice((("[", "]"), ('{"a":', "}")))
            return raw({"type": "session.update", "session": RAW}, open_ * depth + "1" + close * depth), None
        if choice < 0.65:
            # Around the recursion limit, with an escape (which makes the server re-encode it): the
            # depths are swept, since where the limit falls depends on the server's stack.
            depth = edge_depth()
            return raw({"type": "x", "a": RAW}, "[" * depth + '"\\u00e9"' + "]" * depth), None
        depth = r.randint(10, 400)
        inner = r.choice(("1", '"\\u00e9"', "null", "{}"))
        msg = r.choice(
            (
                {"type": "session.update", "session": {"audio": RAW}},
                {"type": "conversation.item.create", "item": {"role": "user", "content": [RAW]}},
                {"type": RAW},
                {"type": "input_audio_buffer.append", "audio": RAW},
                {"type": "conversation.item.truncate", "item_id": "item_x", "audio_end_ms": RAW},
                {"type": "unknown.nested", "payload": RAW},
            )
        )
        return raw({**msg, "event_id": eid}, "[" * depth + inner + "]" * depth), eid

    def _binary_frame(self) -> tuple[bytes, None]:
        r = self.rng
        return r.choice(
            (
                json.dumps({"type": "response.cancel"}).encode(),
                os.urandom(r.randint(1, 2000)),
                b"",
                b"\x00" * r.randint(1, 5000),
            )
        ), None

    def _bad_value(self) -> tuple[str, str]:
        r = self.rng
        eid = self.eid()
        bad_b64 = r.choice(("***not base64***", "abc", "YWJj=", "YW Jj", "YWJj\n", "====", "AAA", "é"))
        msg = r.choice(
            (
                {"type": "input_audio_buffer.append", "audio": bad_b64},
                {"type": "input_audio_buffer.append", "audio": b64(os.urandom(2 * r.randint(0, 200) + 1))},  # odd length
                {"type": "session.update", "session": {"audio": {"input": {"format": r.choice(("audio/opus", "audio/wav", "pcm24", ""))}}}},
                {
                    "type": "session.update",
                    "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": r.choice((8000, 16000, 0, -1))}}}},
                },
                {"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/opus"}}}}},
                {"type": "session.update", "session": {"audio": {"output": {"voice": r.choice(("", " ", "v" * 65))}}}},
                {"type": "session.update", "session": {"audio": {"output": {"speed": r.choice((0, 0.1, 5, -1))}}}},
                {"type": "session.update", "session": {"max_output_tokens": r.choice((0, -5, 5000, "infinite"))}},
                {
                    "type": "session.update",
                    "session": {"audio": {"input": {"turn_detection": {"type": r.choice(("none", "push_to_talk", ""))}}}},
                },
                {"type": "session.update", "session": {"audio": {"input": {"turn_detection": {"threshold": r.choice((0, 1, 1.5, -0.1))}}}}},
                {
                    "type": "session.update",
                    "session": {"audio": {"input": {"turn_detection": {"silence_duration_ms": r.choice((0, 50, 20000))}}}},
                },
                {
                    "type": "session.update",
                    "session": {"audio": {"input": {"transcription": {"language": r.choice(("english", "e", ""))}}}},
                },
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "x"}]},
                },
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": r.choice(("tool", "", "User")), "content": [{"type": "input_text", "text": "x"}]},
                },
                {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c", "output": "{}"}},
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": []}},
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "AAAA"}]},
                },
                {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": r.choice((-1, -0.001))},
            )
        )
        return json.dumps({**msg, "event_id": eid}), eid

    def _out_of_order(self) -> tuple[str, str]:
        r = self.rng
        eid = self.eid()
        forms: list[dict[str, Any]] = [
            {
                "type": "conversation.item.truncate",
                "item_id": f"item_{r.randrange(10**6)}",
                "content_index": 0,
                "audio_end_ms": r.randint(0, 5000),
            },
            {"type": "conversation.item.delete", "item_id": f"item_{r.randrange(10**6)}"},
            {"type": "conversation.item.retrieve", "item_id": f"item_{r.randrange(10**6)}"},
            {"type": "response.cancel"},
            {"type": "response.cancel", "response_id": f"resp_{r.randrange(10**6)}"},
        ]
        if self.vad_on or self.ms_since_commit == 0.0:
            forms.append({"type": "input_audio_buffer.commit"})  # server VAD on: invalid_state; nothing appended: commit_empty
        return json.dumps({**r.choice(forms), "event_id": eid}), eid
