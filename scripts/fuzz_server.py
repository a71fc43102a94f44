#!/usr/bin/env python3
"""Protocol fuzzer: hostile clients against a live server over loopback, a good session beside them.

Without ``--url`` the server is a real ``voiceagent serve`` child process on a free loopback port
(models loaded and warmed as in production).  A child process rather than a server in this
interpreter: the fuzzer's own CPU work does not run on the server's event loop or hold its GIL,
"never crashes" is the process still being alive at the end (and exiting 0 on SIGTERM), and its
log is scanned for tracebacks.  With ``--url ws://HOST:PORT`` a server already running is fuzzed;
it must admit ``--clients`` + 3 sessions at once (``server.max_sessions``; the fuzzer's own server
gets ``2 * clients + 2``: the capacity a small machine measures for itself is one session).

Running together:

* ``--clients`` hostile clients, each a loop of seeded scenarios (``--seed``), sending at most
  ``--rate`` frames a second between them (default 200: each about as chatty as a client
  streaming 20 ms audio chunks; 0: as fast as they can):
  - ``/v1/realtime`` batches of malformed, truncated, wrong-type, unknown-type, missing-field,
    huge-number, lone-surrogate, deeply nested (past and right at the parser's recursion limit),
    binary, invalid-value and out-of-order messages (commit of an empty buffer, truncate, delete
    or retrieve of items that do not exist, cancel with no response), some sent fragmented, some
    compressed (permessage-deflate), a few valid ones among them; then a sync message whose error
    marks that every earlier frame was answered, and an ending: a normal close, an abrupt TCP
    abort (between frames, in the middle of one, or before the answers came), a FIN without a
    close frame, an oversized message (> max_message_bytes: close 1009), invalid UTF-8 in a text
    frame (1007) or a frame that breaks RFC 6455 (1002);
  - audio appended faster than real time (the ``server.audio_burst_s`` limit);
  - slow readers: a tiny receive buffer, a long spoken reply asked for, bad messages flooded,
    nothing read, then gone;
  - ``/twilio`` calls that end with one bad frame of the same kinds, or out of order (media,
    dtmf or marks before ``start``, ``start`` twice, ``stop`` twice, another stream's id);
  - raw TCP: half an HTTP upgrade request then a stall or a drop, bad upgrade requests, garbage;
  - on each route, one stalled reader that completes the handshake and then never answers a
    ping (about ``ping_interval + ping_timeout``, 40-50 s, until the server ends it).
* a good Realtime session that speaks spoken-question fixtures at real-time pace, turn after turn,
  checking each transcript for the fixture's keywords and timing end of speech → first reply
  audio: ``--baseline-turns`` alone first, then under the hostile load;
* a prober that GETs ``/healthz`` every 100 ms and times the answers.

The hostile clients go on until ``--messages`` hostile messages have been sent *and* the good
session has done ``--min-turns`` turns under load (so every one of them is under load: the count
at the end is at least ``--messages``).  The good session and the prober run on an event loop of
their own in a second thread, so that a busy hostile loop does not delay their clocks.

Invariants (exit status 1 when one fails): no close code 1011 anywhere; the server process alive
and ``/healthz`` answering at the end (no traceback or ERROR in its log, and exit 0 on SIGTERM,
when the fuzzer started it); every bad Realtime message answered by an ``error`` event (matched by
the ``event_id`` it carried, counted for the ones whose ``event_id`` the server cannot read);
every bad Twilio frame answered by the close that protocol has instead (1008, 1003 binary, 1007,
1009, 1002); the audio burst limit applied; every good turn completed with its keywords in the
transcript; every ``/healthz`` probe answered.  ``--max-latency-ms`` and ``--max-healthz-ms`` add
bounds on the good session's p50 under load and on the slowest probe.

Output: one JSON report on stdout and in ``--out``/fuzz.json.

    .venv/bin/python scripts/fuzz_server.py                       # 10,000 messages, a server of its own
    .venv/bin/python scripts/fuzz_server.py --messages 600 --url ws://127.0.0.1:8765
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import contextvars
import itertools
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

ROOT = Path(__file__).resolve().parent.parent

from scripts import make_fixtures  # noqa: E402
from scripts.serve_process import ServeProcess  # noqa: E402
from voiceagent.audio import Int16Array, mulaw_encode, read_wav, resample  # noqa: E402
from voiceagent.client import MalformedEvent, RealtimeClient, ResponseStarted, messages  # noqa: E402
from voiceagent.client import Pacer as AudioPacer  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.events import AudioDelta, ErrorEvent, Event, InputTranscriptDone, ResponseDone  # noqa: E402
from voiceagent.replay import speech_turns  # noqa: E402
from voiceagent.transports.realtime_wire import WIRE_RATE  # noqa: E402

CHUNK_MS = 20
# Questions whose transcripts Whisper tiny gets right (as tests/integration/test_concurrency.py).
GOOD_QUESTIONS = ("weather", "colour", "long_question", "count")
GOOD_INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."
SLOW_INSTRUCTIONS = "You are a storyteller. Always answer with a long story of at least six sentences."
ERROR_CAP = 2048
"""The most bytes an ``error`` event may have, whatever message caused it (errors are bounded)."""

REALTIME_CATEGORIES = (
    "malformed_json",
    "truncated_json",
    "not_an_object",
    "wrong_type",
    "missing_field",
    "unknown_type",
    "huge_number",
    "lone_surrogate",
    "deep_nesting",
    "binary_frame",
    "bad_value",
    "out_of_order",
)
TWILIO_CATEGORIES = (*REALTIME_CATEGORIES[:10], "out_of_order")
SCENARIOS = {"realtime_batch": 50, "twilio_call": 34, "raw_tcp": 8, "audio_burst": 2, "slow_reader": 2}
"""Hostile scenarios and their weights; ``stalled_reader`` (one per route, about 50 s) runs beside them."""
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


# ----------------------------------------------------------------------------- frames


def ws_frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True, rsv: int = 0, declared: int | None = None) -> bytes:
    """One RFC 6455 frame as a client sends it (masked), built by hand so that it can be wrong:
    reserved bits, unknown opcodes, an unmasked frame, or a ``declared`` length longer than the
    payload that follows (a frame cut off in the middle)."""
    length = len(payload) if declared is None else declared
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mask_bit = 0x80 if masked else 0
    if length < 126:
        head += bytes([mask_bit | length])
    elif length < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", length)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", length)
    if not masked:
        return head + payload
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + body


RAW = "\u0000raw\u0000"
_EDGE = itertools.count()


def edge_depth() -> int:
    """Nesting depths around Python's recursion limit (1000), one after the other."""
    return 850 + next(_EDGE) % 151


def raw(msg: dict[str, Any], token: str) -> str:
    """``msg`` as JSON with the string ``RAW`` replaced by ``token`` verbatim (JSON the encoder
    would never write: 1e400, NaN, escapes of lone surrogates, nesting past the parser's limit)."""
    return json.dumps(msg).replace(json.dumps(RAW), token)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pcm_b64(samples: int, rng: random.Random, amplitude: int = 30) -> str:
    """Quiet noise (far below speech: VAD keeps still) as base64 16-bit PCM."""
    noise = np.array([rng.randint(-amplitude, amplitude) for _ in range(min(samples, 64))], dtype="<i2")
    return b64(np.resize(noise, samples).astype("<i2").tobytes())


# ----------------------------------------------------------------------------- bookkeeping


@dataclass
class Msg:
    """One frame a hostile Realtime client sends, and what the server owes it."""

    category: str
    frame: str | bytes
    bad: bool  # the server must answer it with an ``error`` event
    event_id: str | None = None  # the event_id the error must echo (None: the message has none the server can read)


@dataclass
class Stats:
    sent: Counter[str] = field(default_factory=Counter)  # hostile messages by category
    valid_frames: Counter[str] = field(default_factory=Counter)  # well-formed frames hostile clients sent around them
    scenarios: Counter[str] = field(default_factory=Counter)
    fragmented: int = 0
    close_codes: Counter[str] = field(default_factory=Counter)
    close_1011: list[str] = field(default_factory=list)
    unexpected_closes: Counter[str] = field(default_factory=Counter)
    unexpected_close_samples: list[str] = field(default_factory=list)
    rt_bad: int = 0
    rt_bad_answered: int = 0
    rt_unverifiable: int = 0  # bad messages followed by the client vanishing before it could read the answer
    rt_missing: int = 0
    rt_missing_samples: list[str] = field(default_factory=list)
    rt_errors: int = 0
    rt_error_codes: Counter[str] = field(default_factory=Counter)
    rt_valid_errored: Counter[str] = field(default_factory=Counter)
    rt_rate_errors: int = 0
    burst_without_rate_error: int = 0
    tw_bad: int = 0
    tw_refused: int = 0
    tw_not_refused: int = 0
    tw_not_refused_samples: list[str] = field(default_factory=list)
    http_answers: Counter[str] = field(default_factory=Counter)
    refused_handshakes: Counter[str] = field(default_factory=Counter)
    client_exceptions: Counter[str] = field(default_factory=Counter)
    client_exception_samples: list[str] = field(default_factory=list)
    rt_error_max_bytes: int = 0  # the largest error event received, as sent
    rt_error_oversized: list[str] = field(default_factory=list)  # error events over ERROR_CAP bytes (their code and size)

    def error_size(self, raw: str | bytes, msg: dict[str, Any]) -> None:
        """Note the size of an ``error`` event: none may exceed :data:`ERROR_CAP`, whatever caused it."""
        size = len(raw.encode() if isinstance(raw, str) else raw)
        self.rt_error_max_bytes = max(self.rt_error_max_bytes, size)
        if size > ERROR_CAP and len(self.rt_error_oversized) < 20:
            self.rt_error_oversized.append(f"{(msg.get('error') or {}).get('code')}: {size} bytes")

    def close(self, route: str, code: int | None, expected: set[int] | None, what: str) -> None:
        shown = "none" if code is None else str(code)
        self.close_codes[f"{route}:{shown}"] += 1
        if code == 1011:
            self.close_1011.append(f"{route} {what}")
        if expected is not None and code not in expected:
            self.unexpected_closes[f"{route}:{what}:{shown}"] += 1
            if len(self.unexpected_close_samples) < 20:
                self.unexpected_close_samples.append(f"{route} {what}: got {shown}, expected {sorted(expected)}")

    def exception(self, where: str, exc: BaseException) -> None:
        key = f"{where}:{type(exc).__name__}"
        self.client_exceptions[key] += 1
        if len(self.client_exception_samples) < 20:
            self.client_exception_samples.append(f"{key}: {str(exc)[:200]}")


# ----------------------------------------------------------------------------- message generators


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


class TwilioGen:
    """Seeded Media Streams frames: a valid call's, and one bad frame to end it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sid = f"MZfuzz{rng.randrange(10**9)}"
        self.seq = 0

    def numbered(self, msg: dict[str, Any]) -> str:
        self.seq += 1
        return json.dumps({**msg, "sequenceNumber": str(self.seq)})

    def connected(self) -> str:
        return json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})

    def start(self) -> str:
        start = {
            "streamSid": self.sid,
            "accountSid": "ACfuzz",
            "callSid": "CAfuzz",
            "tracks": ["inbound"],
            "customParameters": {"who": "fuzz"},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        }
        return self.numbered({"event": "start", "streamSid": self.sid, "start": start})

    def media(self) -> str:
        payload = b64(mulaw_encode(np.array([self.rng.randint(-30, 30) for _ in range(160)], dtype=np.int16)))
        media = {"track": "inbound", "chunk": str(self.seq), "timestamp": str(self.seq * 20), "payload": payload}
        return self.numbered({"event": "media", "streamSid": self.sid, "media": media})

    def dtmf(self) -> str:
        return self.numbered(
            {"event": "dtmf", "streamSid": self.sid, "dtmf": {"track": "inbound_track", "digit": self.rng.choice("0123456789*#")}}
        )

    def stop(self) -> str:
        return self.numbered({"event": "stop", "streamSid": self.sid, "stop": {"accountSid": "ACfuzz", "callSid": "CAfuzz"}})

    def bad(self, category: str, started: bool) -> str | bytes:
        """One frame the server must refuse (``started``: a valid ``start`` came before)."""
        r = self.rng
        sid = self.sid
        if category == "malformed_json":
            return r.choice(
                ("{nope", '{"event": "media",', "", "{'event': 'stop'}", '{"event": "stop"} x', '{"event": "media", "streamSid": "' + sid)
            )
        if category == "truncated_json":
            text = self.media() if started else self.start()
            return text[: r.randrange(len(text))]
        if category == "not_an_object":
            return r.choice(('["media"]', "7", "null", '"stop"', "[]"))
        if category == "wrong_type":
            return (
                r.choice(
                    (
                        json.dumps({"event": r.choice((5, None, [], {}, True))}),
                        json.dumps({"event": "media", "streamSid": sid, "media": {"payload": r.choice((5, None, [], {}))}}),
                        json.dumps({"event": "media", "streamSid": sid, "media": r.choice(("AAAA", 5, []))}),
                        json.dumps(
                            {
                                "event": "media",
                                "streamSid": sid,
                                "sequenceNumber": r.choice(("two", -1, 1.5, True, [])),
                                "media": {"payload": ""},
                            }
                        ),
                        json.dumps({"event": "media", "streamSid": sid, "media": {"payload": "", "track": r.choice((5, [], None))}}),
                        json.dumps(
                            {"event": "media", "streamSid": sid, "media": {"payload": "", "timestamp": r.choice(("soon", -5, 1.5))}}
                        ),
                        json.dumps({"event": "dtmf", "streamSid": sid, "dtmf": {"digit": r.choice((5, None, []))}}),
                        json.dumps({"event": "mark", "streamSid": sid, "mark": r.choice(("m1", 5, []))}),
                        json.dumps({"event": "start", "streamSid": "MZ2", "start": {"streamSid": r.choice((5, "", None, []))}}),
                        json.dumps({"event": "start", "start": {"streamSid": "MZ2", "tracks": r.choice(("inbound", [5], 5))}}),
                        json.dumps({"event": "start", "start": {"streamSid": "MZ2", "mediaFormat": r.choice(("mulaw", 5, []))}}),
                    )
                )
                if started
                else json.dumps({"event": "start", "start": r.choice(("x", 5, []))})
            )
        if category == "missing_field":
            return (
                r.choice(
                    (
                        json.dumps({"streamSid": sid, "media": {"payload": ""}}),
                        json.dumps({"event": "media", "streamSid": sid}),
                        json.dumps({"event": "media", "streamSid": sid, "media": {}}),
                        json.dumps({"event": "dtmf", "streamSid": sid}),
                        json.dumps({"event": "mark", "streamSid": sid, "mark": {}}),
                    )
                )
                if started
                else json.dumps({"event": "start", "start": {"callSid": "CA1"}})
            )
        if category == "unknown_type":
            return json.dumps({"event": r.choice(("Media", "clear", "hangup", "", "start ", "x" * 3000)), "streamSid": sid})
        if category == "huge_number":
            digits = "9" * r.randint(4301, 20000)  # more digits than Python converts to an int
            media = {"event": "media", "streamSid": sid, "media": {"payload": ""}}
            return r.choice(
                (
                    raw({**media, "sequenceNumber": RAW}, r.choice(("1e400", digits, "-1", "NaN"))),
                    raw({**media, "media": {"payload": "", "timestamp": RAW}}, r.choice(("NaN", "Infinity", "1e400", digits))),
                    raw({"event": "start", "start": {"streamSid": "MZ9", "mediaFormat": {"sampleRate": RAW}}}, r.choice(("1e999", digits))),
                    raw({"event": "start", "start": {"streamSid": "MZ9", "mediaFormat": {"channels": RAW}}}, "-Infinity"),
                    # Twilio sends numbers as digit strings: so may a hostile peer, of any length
                    json.dumps({**media, "sequenceNumber": digits}),
                    json.dumps({**media, "media": {"payload": "", "timestamp": digits}}),
                    json.dumps({"event": "start", "start": {"streamSid": "MZ9", "mediaFormat": {"sampleRate": digits}}}),
                )
            )
        if category == "lone_surrogate":
            return r.choice(
                (
                    f'{{"event": "media", "streamSid": "{sid}", "media": {{"payload": "\\ud800"}}}}',
                    '{"event": "\\udfff"}',
                    '{"event": "start", "start": {"streamSid": "MZ\\ud83d", "callSid": "CA"}}',
                    f'{{"event": "dtmf", "streamSid": "{sid}", "dtmf": {{"digit": "\\udc00"}}}}',
                )
            )
        if category == "deep_nesting":
            choice = r.random()
            depth = r.randint(2000, 50_000) if choice < 0.35 else edge_depth() if choice < 0.65 else r.randint(10, 400)
            return raw({"event": "media", "streamSid": sid, "media": RAW}, "[" * depth + '"\\u00e9"' + "]" * depth)
        if category == "binary_frame":
            return r.choice((os.urandom(r.randint(1, 500)), json.dumps({"event": "connected"}).encode(), b""))
        if category == "bad_value":
            return (
                r.choice(
                    (
                        json.dumps({"event": "media", "streamSid": sid, "media": {"payload": r.choice(("!!not base64!!", "abc", "A=A="))}}),
                        json.dumps(
                            {
                                "event": "start",
                                "start": {"streamSid": "MZ2", "mediaFormat": {"encoding": "audio/x-l16", "sampleRate": "16000"}},
                            }
                        ),
                        json.dumps({"event": "start", "start": {"streamSid": "MZ2", "mediaFormat": {"channels": "2"}}}),
                    )
                )
                if started
                else json.dumps({"event": "start", "start": {"streamSid": "MZ2", "mediaFormat": {"sampleRate": 44100}}})
            )
        # out of order
        if not started:
            return r.choice(
                (
                    json.dumps({"event": "media", "streamSid": sid, "media": {"payload": ""}}),
                    json.dumps({"event": "dtmf", "streamSid": sid, "dtmf": {"digit": "1"}}),
                    json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": "m1"}}),
                    json.dumps({"event": "stop", "streamSid": sid}),
                )
            )
        return r.choice(
            (
                self.start(),  # a second start
                json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": f"m{r.randrange(1000)}"}}),  # a mark never sent
                json.dumps({"event": "media", "streamSid": "MZother", "media": {"payload": ""}}),  # another stream
                json.dumps({"event": "dtmf", "streamSid": "MZother", "dtmf": {"digit": "1"}}),
            )
        )


# ----------------------------------------------------------------------------- hostile scenarios


class Pacer:
    """A hostile client's pace: ``rate`` frames a second (0: as fast as it can), bursts of 0.2 s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.t = 0.0

    async def __call__(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self.t = max(self.t, now - 0.2) + 1.0 / self.rate
        if self.t > now:
            await asyncio.sleep(self.t - now)  # the client's own pace, not synchronisation


_PACER: contextvars.ContextVar[Pacer | None] = contextvars.ContextVar("pacer", default=None)


async def pace() -> None:
    """Wait for this client's next frame slot."""
    pacer = _PACER.get()
    if pacer is not None:
        await pacer()


def server_json(raw: str | bytes) -> dict[str, Any]:
    """One server message; anything but a JSON object is recorded as such (and checked by no one)."""
    try:
        msg = json.loads(raw)
    except ValueError:
        return {"type": "fuzz.not_json", "raw": repr(raw[:200])}
    return msg if isinstance(msg, dict) else {"type": "fuzz.not_an_object"}


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of the unmasked frames in ``data`` (what a server sends)."""
    out = []
    i = 0
    while i + 2 <= len(data):
        opcode, length = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if length == 126:
            (length,) = struct.unpack("!H", data[i : i + 2])
            i += 2
        elif length == 127:
            (length,) = struct.unpack("!Q", data[i : i + 8])
            i += 8
        out.append((opcode, data[i : i + length]))
        i += length
    return out


def _close_code(ws: ClientConnection) -> int | None:
    """The code of the close frame the server sent (None: it sent none)."""
    rcvd = ws.protocol.close_rcvd
    return rcvd.code if rcvd is not None else None


class Hostile:
    """The hostile clients: scenarios picked by a seeded generator until ``target`` hostile
    messages have been sent and (``go_on`` cleared) the good session has finished its turns under
    load: every one of them is under load, and the count at the end is at least the target."""

    def __init__(
        self, base: str, target: int, stats: Stats, max_bytes: int, burst_s: float, seed: int, kinds: set[str], go_on: threading.Event
    ) -> None:
        self.base = base.rstrip("/")
        parts = urlsplit(self.base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.target = target
        self.reached = threading.Event()
        self.stats = stats
        self.max_bytes = max_bytes
        self.burst_s = burst_s
        self.seed = seed
        self.kinds = kinds
        self.go_on = go_on  # set while the good session still has turns to do under load
        self.timeout = 30.0

    async def client(self, index: int, rate: float) -> None:
        rng = random.Random(f"{self.seed}-{index}")
        _PACER.set(Pacer(rate))
        run: dict[str, Callable[[random.Random, str], Any]] = {
            "realtime_batch": self.realtime_batch,
            "twilio_call": self.twilio_call,
            "raw_tcp": self.raw_tcp,
            "audio_burst": self.audio_burst,
            "slow_reader": self.slow_reader,
        }
        names = [k for k in SCENARIOS if k in self.kinds]
        if not names:
            return
        weights = [SCENARIOS[k] for k in names]
        n = 0
        while not self.reached.is_set() or self.go_on.is_set():
            n += 1
            name = rng.choices(names, weights)[0]
            fn = run[name]
            self.stats.scenarios[name] += 1
            try:
                await asyncio.wait_for(fn(rng, f"c{index}s{n}"), 120)
            except Exception as exc:  # recorded and reported; the run goes on
                self.stats.exception(name, exc)
                if isinstance(exc, ConnectionRefusedError):
                    return  # the server is gone: the run will say so
            if sum(self.stats.sent.values()) >= self.target:
                self.reached.set()

    # ------------------------------------------------------------------ Realtime

    async def _open_realtime(self, rng: random.Random) -> tuple[ClientConnection, list[dict[str, Any]], asyncio.Task[None], asyncio.Event]:
        compression = rng.choice(("deflate", None))  # frames compressed or not (permessage-deflate)
        ws = await connect(f"{self.base}/v1/realtime", max_size=None, open_timeout=self.timeout, compression=compression)
        events: list[dict[str, Any]] = []
        arrived = asyncio.Event()

        async def pump() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    msg = server_json(raw)
                    if msg.get("type") == "error":
                        self.stats.error_size(raw, msg)
                    events.append(msg)
                    arrived.set()
            arrived.set()

        task = asyncio.create_task(pump())
        return ws, events, task, arrived

    async def _wait_event(
        self, events: list[dict[str, Any]], arrived: asyncio.Event, task: asyncio.Task[None], pred: Callable[[dict[str, Any]], bool]
    ) -> bool:
        async def until() -> bool:
            while True:
                if any(pred(e) for e in events):
                    return True
                if task.done():
                    return False
                arrived.clear()
                await arrived.wait()

        try:
            return await asyncio.wait_for(until(), self.timeout)
        except TimeoutError:
            return False

    async def realtime_batch(self, rng: random.Random, tag: str) -> None:
        ws, events, pump, arrived = await self._open_realtime(rng)
        gen = RealtimeGen(rng, tag)
        if not await self._wait_event(events, arrived, pump, lambda e: e.get("type") == "session.created"):
            self.stats.exception("realtime_batch", TimeoutError(f"{tag}: no session.created"))
        ending = rng.choices(
            (
                "close",
                "abort",
                "abort_mid_frame",
                "abort_unanswered",
                "oversized",
                "invalid_utf8",
                "protocol_violation",
                "fin_without_close",
            ),
            (40, 12, 6, 4, 10, 10, 10, 8),
        )[0]
        size = rng.randint(5, 80)
        sent: list[Msg] = []
        for _ in range(size):
            for _ in range(rng.choice((0, 0, 0, 1))):  # a few valid messages in between
                msg = gen.valid()
                await pace()
                await ws.send(msg.frame)
                self.stats.valid_frames["realtime"] += 1
                sent.append(msg)
            msg = gen.bad(rng.choice(REALTIME_CATEGORIES))
            await pace()
            await self._send(ws, msg.frame, rng)
            self.stats.sent[f"realtime.{msg.category}"] += 1
            sent.append(msg)
        if ending == "abort_unanswered":
            # Gone before the server could answer: these cannot be checked (counted as such).
            ws.transport.abort()
            await pump
            self.stats.rt_unverifiable += sum(m.bad for m in sent)
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            return
        sync = gen.eid()
        await pace()
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_fuzz_sync", "event_id": sync}))
        self.stats.valid_frames["realtime"] += 1
        synced = await self._wait_event(
            events, arrived, pump, lambda e: e.get("type") == "error" and (e.get("error") or {}).get("event_id") == sync
        )
        if not synced:
            self.stats.exception("realtime_batch", TimeoutError(f"{tag}: the sync message was not answered"))
        self._check_answers(sent, events, synced, tag)
        await self._end_realtime(ws, pump, ending, rng)

    async def _send(self, ws: ClientConnection, frame: str | bytes, rng: random.Random) -> None:
        """Send one message, now and then in fragments (the server reassembles them)."""
        if isinstance(frame, str) and len(frame) > 8 and rng.random() < 0.08:
            data = frame.encode()
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 4))))
            parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            self.stats.fragmented += 1
            await ws.send(parts, text=True)  # may split a UTF-8 sequence: only the whole message must be valid
        else:
            await ws.send(frame)

    def _check_answers(self, sent: list[Msg], events: list[dict[str, Any]], synced: bool, tag: str) -> None:
        errors = [e.get("error") or {} for e in events if e.get("type") == "error"]
        self.stats.rt_errors += len(errors)
        by_id: dict[str, dict[str, Any]] = {}
        unnamed = 0
        for err in errors:
            self.stats.rt_error_codes[str(err.get("code"))] += 1
            if err.get("code") == "input_audio_rate_exceeded":
                self.stats.rt_rate_errors += 1
            eid = err.get("event_id")
            if isinstance(eid, str):
                by_id.setdefault(eid, err)
            else:
                unnamed += 1
        expected_unnamed = 0
        for msg in sent:
            if not msg.bad:
                if msg.event_id in by_id:
                    self.stats.rt_valid_errored[str(by_id[msg.event_id].get("code"))] += 1
                continue
            self.stats.rt_bad += 1
            if msg.event_id is None:
                expected_unnamed += 1
                continue
            if msg.event_id in by_id:
                self.stats.rt_bad_answered += 1
            else:
                self._missing(tag, msg, synced)
        answered = min(unnamed, expected_unnamed)
        self.stats.rt_bad_answered += answered
        if answered < expected_unnamed:
            lacking = [m for m in sent if m.bad and m.event_id is None]
            for m in lacking[: expected_unnamed - answered]:
                self._missing(tag, m, synced, counted_only=True)

    def _missing(self, tag: str, msg: Msg, synced: bool, counted_only: bool = False) -> None:
        self.stats.rt_missing += 1
        if len(self.stats.rt_missing_samples) < 25:
            frame = msg.frame if isinstance(msg.frame, str) else repr(msg.frame)
            how = "(by count)" if counted_only else ""
            self.stats.rt_missing_samples.append(f"{tag} {msg.category}{how} synced={synced}: {frame[:300]}")

    async def _end_realtime(self, ws: ClientConnection, pump: asyncio.Task[None], ending: str, rng: random.Random) -> None:
        await pace()
        expected: set[int] | None
        if ending == "close":
            await ws.close()
            expected = {1000}
        elif ending == "abort":
            ws.transport.abort()
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            expected = None
        elif ending == "fin_without_close":
            ws.transport.write_eof() if ws.transport.can_write_eof() else ws.transport.close()  # TCP FIN, no close frame
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            expected = None
        elif ending == "abort_mid_frame":
            payload = json.dumps({"type": "input_audio_buffer.append", "audio": pcm_b64(4800, rng)}).encode()
            frame = ws_frame(0x1, payload)
            ws.transport.write(frame[: rng.randint(1, len(frame) - 1)])
            ws.transport.abort()
            self.stats.sent["realtime.partial_frame"] += 1
            expected = None
        elif ending == "oversized":
            self.stats.sent["realtime.oversized"] += 1
            await self._oversized(ws, rng, {"type": "input_audio_buffer.append", "audio": ""}, "audio")
            expected = {1009}
        elif ending == "invalid_utf8":
            self.stats.sent["realtime.invalid_utf8"] += 1
            await self._invalid_utf8(ws, rng, '{"type": "session.update", "session": {"instructions": "')
            expected = {1007}
        else:
            self.stats.sent["realtime.protocol_violation"] += 1
            self._protocol_violation(ws, rng)
            expected = {1002, 1007}  # 1007: RSV1 set where permessage-deflate was agreed, and the data does not inflate
        await self._await_close(pump)
        if expected is not None:
            self.stats.close("realtime", _close_code(ws), expected, ending)

    async def _await_close(self, pump: asyncio.Task[None]) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), self.timeout)
        if not pump.done():
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _oversized(self, ws: ClientConnection, rng: random.Random, template: dict[str, Any], key: str) -> None:
        over = self.max_bytes + rng.randint(1, 64 * 1024)
        text = json.dumps({**template, key: "A" * over})
        with contextlib.suppress(ConnectionClosed):
            if rng.random() < 0.3:  # the same in fragments: the whole message is what counts
                third = len(text) // 3
                await ws.send([text[:third], text[third : 2 * third], text[2 * third :]])
            else:
                await ws.send(text)

    async def _invalid_utf8(self, ws: ClientConnection, rng: random.Random, prefix: str) -> None:
        bad = rng.choice(
            (b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xf4\x90\x80\x80")
        )
        data = prefix.encode() + bad + b'"}}'
        with contextlib.suppress(ConnectionClosed):
            if rng.random() < 0.3:
                await ws.send([data[: len(prefix) + 1], data[len(prefix) + 1 :]], text=True)
            else:
                await ws.send(data, text=True)

    def _protocol_violation(self, ws: ClientConnection, rng: random.Random) -> None:
        """Write one frame RFC 6455 forbids, under the client library (the server closes with 1002)."""
        kind = rng.randrange(9)
        text = b'{"type": "response.cancel"}'
        frames = [
            ws_frame(0x1, text, masked=False),  # a client frame must be masked
            ws_frame(0x1, text, rsv=rng.choice((1, 2, 4))),  # reserved bits, no extension negotiated
            ws_frame(rng.choice((0x3, 0x4, 0x5, 0xB, 0xF)), text),  # reserved opcodes
            ws_frame(0x0, text),  # a continuation with nothing to continue
            ws_frame(0x9, b"x", fin=False),  # a fragmented control frame
            ws_frame(0x9, b"x" * 200),  # a control frame over 125 bytes
            ws_frame(
                0x8, struct.pack("!H", rng.choice((999, 1004, 1005, 1006, 1015, 5000))) + b"bye"
            ),  # a close code not allowed on the wire
            ws_frame(0x1, text[:5], fin=False) + ws_frame(0x1, text[5:]),  # a new message inside a fragmented one
            ws_frame(0x8, b"\x03"),  # a close payload of one byte
        ]
        ws.transport.write(frames[kind])

    async def audio_burst(self, rng: random.Random, tag: str) -> None:
        """Audio far faster than real time: past ``audio_burst_s`` the server refuses chunks."""
        ws, events, pump, arrived = await self._open_realtime(rng)
        await self._wait_event(events, arrived, pump, lambda e: e.get("type") == "session.created")
        t0 = time.monotonic()
        chunk_s = 0.5
        chunks = int((self.burst_s + 2.0) / chunk_s) + 1
        n = chunks
        prefix = f"{tag}-burst"
        for i in range(n):
            await pace()
            await ws.send(
                json.dumps(
                    {"type": "input_audio_buffer.append", "event_id": f"{prefix}-{i}", "audio": pcm_b64(int(chunk_s * WIRE_RATE), rng)}
                )
            )
        self.stats.sent["realtime.audio_burst"] += n
        sync = f"{tag}-sync"
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_fuzz_sync", "event_id": sync}))
        await self._wait_event(events, arrived, pump, lambda e: (e.get("error") or {}).get("event_id") == sync)
        elapsed = time.monotonic() - t0
        refused = sum(1 for e in events if (e.get("error") or {}).get("code") == "input_audio_rate_exceeded")
        self.stats.rt_rate_errors += refused
        self.stats.rt_errors += sum(1 for e in events if e.get("type") == "error")
        if n * chunk_s > self.burst_s + elapsed + 1.0 and refused == 0:
            self.stats.burst_without_rate_error += 1
        await ws.close()
        await self._await_close(pump)
        self.stats.close("realtime", _close_code(ws), {1000}, "audio_burst")

    async def slow_reader(self, rng: random.Random, tag: str) -> None:
        """Asks for a long spoken reply, floods bad messages, never reads a byte, then vanishes."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (self.host, self.port))
        ws = await connect(f"{self.base}/v1/realtime", sock=sock, max_size=None, max_queue=1, open_timeout=self.timeout)
        gen = RealtimeGen(rng, tag)
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story about a lighthouse."}]}
        for msg in (
            {"type": "session.update", "session": {"instructions": SLOW_INSTRUCTIONS, "max_output_tokens": 200}},
            {"type": "conversation.item.create", "item": item},
            {"type": "response.create"},
        ):
            await ws.send(json.dumps(msg))
            self.stats.valid_frames["realtime"] += 1
        flood = rng.randint(20, 200)
        for _ in range(flood):
            msg = gen.bad(rng.choice(REALTIME_CATEGORIES))
            await pace()
            try:
                await asyncio.wait_for(ws.send(msg.frame), 5)
            except (TimeoutError, ConnectionClosed):
                break  # the server stopped reading too: its answers have nowhere to go
            self.stats.sent["realtime.slow_reader"] += 1
        hold = rng.uniform(0.5, 4.0)
        await asyncio.sleep(hold)  # the client's behaviour (it hangs), not synchronisation
        ws.transport.abort()
        self.stats.sent["realtime.abrupt_disconnect"] += 1

    # ------------------------------------------------------------------ Twilio

    async def twilio_call(self, rng: random.Random, tag: str) -> None:
        gen = TwilioGen(rng)
        ws = await connect(f"{self.base}/twilio", max_size=None, open_timeout=self.timeout, compression=rng.choice(("deflate", None)))
        events: list[dict[str, Any]] = []

        async def pump() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    events.append(server_json(raw))

        reader = asyncio.create_task(pump())
        ending = rng.choices(("bad", "stop_twice", "abort", "oversized", "invalid_utf8", "protocol_violation"), (70, 6, 6, 6, 6, 6))[0]
        category = rng.choice(TWILIO_CATEGORIES)
        started = ending != "bad" or rng.random() < 0.7  # most bad frames come mid-call, some before ``start``
        frames: list[str] = []
        if rng.random() < 0.8:
            frames.append(gen.connected())
        if started:
            frames.append(gen.start())
            frames += [gen.media() for _ in range(rng.randint(0, 25))]
            if rng.random() < 0.3:
                frames.append(gen.dtmf())
        for frame in frames:
            await pace()
            await ws.send(frame)
        self.stats.valid_frames["twilio"] += len(frames)
        await pace()
        expected: set[int] | None
        if ending == "bad":
            frame = gen.bad(category, started)
            self.stats.sent[f"twilio.{category}"] += 1
            self.stats.tw_bad += 1
            expected = {1003} if isinstance(frame, bytes) else {1008}
            with contextlib.suppress(ConnectionClosed):
                await ws.send(frame)
        elif ending == "stop_twice":
            self.stats.sent["twilio.out_of_order"] += 1
            expected = {1000}
            with contextlib.suppress(ConnectionClosed):
                if not started:
                    await ws.send(gen.start())
                await ws.send(gen.stop())
                await ws.send(gen.stop())
        elif ending == "abort":
            self.stats.sent["twilio.abrupt_disconnect"] += 1
            ws.transport.abort()
            await self._await_close(reader)
            return
        elif ending == "oversized":
            self.stats.sent["twilio.oversized"] += 1
            self.stats.tw_bad += 1
            await self._oversized(ws, rng, {"event": "media", "streamSid": gen.sid, "media": {"payload": ""}}, "pad")
            expected = {1009}
        elif ending == "invalid_utf8":
            self.stats.sent["twilio.invalid_utf8"] += 1
            self.stats.tw_bad += 1
            await self._invalid_utf8(ws, rng, f'{{"event": "dtmf", "streamSid": "{gen.sid}", "dtmf": {{"digit": "')
            expected = {1007}
        else:
            self.stats.sent["twilio.protocol_violation"] += 1
            self.stats.tw_bad += 1
            self._protocol_violation(ws, rng)
            expected = {1002, 1007}
        await self._await_close(reader)
        code = _close_code(ws)
        if ending != "stop_twice":
            if code is not None and code != 1000:
                self.stats.tw_refused += 1
            else:
                self.stats.tw_not_refused += 1
                if len(self.stats.tw_not_refused_samples) < 20:
                    self.stats.tw_not_refused_samples.append(f"{tag} {ending}/{category} started={started}: close {code}")
        self.stats.close("twilio", code, expected, ending if ending != "bad" else category)

    async def stalled_reader(self, route: str) -> None:
        """A client that completes the handshake, then reads bytes but never answers a ping (as a
        client whose reading has stopped looks to the server): the server's keepalive must end it
        with 1008, not the WebSocket library's 1011.  Takes about ping_interval + ping_timeout."""
        name = "realtime" if route == "/v1/realtime" else "twilio"
        self.stats.sent[f"{name}.stalled_reader"] += 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        key = b64(os.urandom(16))
        writer.write(
            f"GET {route} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        data = b""
        try:
            async with asyncio.timeout(180):
                while chunk := await reader.read(65536):
                    data += chunk
        except (OSError, TimeoutError) as exc:
            self.stats.exception("stalled_reader", exc)
        finally:
            writer.transport.abort()
        body = data.split(b"\r\n\r\n", 1)[-1]
        closes = [payload for opcode, payload in server_frames(body) if opcode == 0x8]
        code = struct.unpack("!H", closes[0][:2])[0] if closes and len(closes[0]) >= 2 else None
        self.stats.close(name, code, {1008}, "stalled_reader")

    # ------------------------------------------------------------------ raw TCP

    async def raw_tcp(self, rng: random.Random, tag: str) -> None:
        kind = rng.choices(("partial_handshake", "bad_upgrade", "garbage"), (45, 30, 25))[0]
        await pace()
        self.stats.sent[f"tcp.{kind}"] += 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        path = rng.choice(("/v1/realtime", "/twilio", "/healthz", "/", "/twilio/twiml"))
        key = b64(os.urandom(16))
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        try:
            if kind == "partial_handshake":
                writer.write(request[: rng.randint(1, len(request) - 2)])
                await writer.drain()
                if rng.random() < 0.5:
                    await asyncio.sleep(rng.uniform(0.1, 3.0))  # a client that stalls mid-request, then goes
                return
            if kind == "bad_upgrade":
                data = rng.choice(
                    (
                        request.replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"),
                        request.replace(f"Sec-WebSocket-Key: {key}\r\n".encode(), b""),
                        request.replace(key.encode(), b"short"),
                        request.replace(b"GET", b"POST"),
                        request.replace(b"HTTP/1.1", b"HTTP/1.0"),
                        request.replace(b"Upgrade: websocket", b"Upgrade: h2c"),
                        request[:-2] + b"X-Long: " + b"a" * rng.randint(9000, 20000) + b"\r\n\r\n",
                        request[:-2] + b"".join(b"X-H%d: v\r\n" % i for i in range(rng.randint(100, 300))) + b"\r\n",
                        f"GET /{'a' * rng.randint(9000, 12000)} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                    )
                )
            else:
                data = rng.choice(
                    (os.urandom(rng.randint(1, 4000)), b"\r\n" * 50, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64))
                )
            writer.write(data)
            await writer.drain()
            with contextlib.suppress(TimeoutError, OSError):
                answer = await asyncio.wait_for(reader.read(4096), self.timeout)
                status = answer.split(b"\r\n", 1)[0].decode("latin-1")
                self.stats.http_answers[f"{kind}:{status[9:12] or 'closed'}"] += 1
        finally:
            writer.transport.abort()


# ----------------------------------------------------------------------------- the good session and the prober


@dataclass
class Question:
    name: str
    pcm: Int16Array  # 24 kHz, with a tail of silence
    speech_end_s: float
    keywords: tuple[str, ...]


def questions() -> list[Question]:
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    out = []
    for name in GOOD_QUESTIONS:
        pcm, rate = read_wav(paths[name])
        wire = resample(pcm, rate, WIRE_RATE)
        end_s = speech_turns(wire, WIRE_RATE)[-1][1]
        out.append(Question(name, wire, end_s, make_fixtures.FIXTURES[name].keywords[0]))
    return out


@dataclass
class Turn:
    phase: str
    question: str
    ok: bool
    transcript: str
    latency_ms: float | None
    status: str
    errors: list[str]
    reply: str = ""


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    arr = np.array(values, dtype=np.float64)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(arr, 50)), 1),
        "p95": round(float(np.percentile(arr, 95)), 1),
        "max": round(float(arr.max()), 1),
    }


_E = TypeVar("_E", bound=Event)


class GoodSession:
    """One well-behaved Realtime session: a microphone that never stops (questions, then silence
    until the answer is done), and a ``/healthz`` prober, on an event loop of their own."""

    def __init__(self, base: str, qs: list[Question]) -> None:
        self.base = base.rstrip("/")
        parts = urlsplit(self.base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.qs = qs
        self.turns: list[Turn] = []
        self.health: dict[str, list[float]] = {"baseline": [], "load": []}
        self.health_failures: Counter[str] = Counter()
        self.phase = "baseline"
        self.close_code: int | None = None
        self.failure: str | None = None
        self.baseline_done = threading.Event()  # set: the hostile clients start
        self.go_on = threading.Event()  # set while turns under load are still to come
        self.go_on.set()
        self.target_reached = threading.Event()  # set by the hostile clients
        self.hostile_done = threading.Event()

    def run(self, baseline_turns: int, min_turns: int) -> None:
        asyncio.run(self._main(baseline_turns, min_turns))

    async def _main(self, baseline_turns: int, min_turns: int) -> None:
        stop = asyncio.Event()
        prober = asyncio.create_task(self._probe(stop))
        try:
            await self._converse(baseline_turns, min_turns)
        except (OSError, InvalidHandshake, ConnectionClosed, TimeoutError) as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.go_on.clear()
            self.baseline_done.set()
            if not self.hostile_done.is_set():
                await asyncio.to_thread(self.hostile_done.wait)
            stop.set()
            await prober

    async def _probe(self, stop: asyncio.Event) -> None:
        request = f"GET /healthz HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n\r\n".encode()
        while not stop.is_set():
            phase = self.phase
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 30)
                writer.write(request)
                answer = await asyncio.wait_for(reader.read(), 30)
                writer.close()
                if not answer.startswith(b"HTTP/1.1 200"):
                    self.health_failures[answer[:12].decode("latin-1") or "empty"] += 1
                else:
                    self.health[phase].append((time.monotonic() - t0) * 1000)
            except (OSError, TimeoutError) as exc:
                self.health_failures[type(exc).__name__] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, 0.1 - (time.monotonic() - t0)))  # the probe period

    async def _converse(self, baseline_turns: int, min_turns: int) -> None:
        async with connect(f"{self.base}/v1/realtime", max_size=None, open_timeout=60) as ws:
            client = RealtimeClient()
            events: list[Event] = []  # the client core's, each stamped with its arrival
            arrived = asyncio.Event()

            async def pump() -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for raw in ws:
                        events.extend(client.feed(raw, time.monotonic()))
                        arrived.set()
                arrived.set()

            reader = asyncio.create_task(pump())
            update = messages.session_update(input_format=None, output_format=None, instructions=GOOD_INSTRUCTIONS, max_output_tokens=60)
            await ws.send(json.dumps(update))
            mic = _Mic(ws)
            k = 0
            load_turns = 0
            while True:
                if self.phase == "baseline" and k >= baseline_turns:
                    self.phase = "load"
                    self.baseline_done.set()
                if self.phase == "load" and self.target_reached.is_set() and load_turns >= min_turns:
                    break
                q = self.qs[k % len(self.qs)]
                k += 1
                turn = await self._turn(ws, mic, q, events, arrived, reader)
                self.turns.append(turn)
                if self.phase == "load":
                    load_turns += 1
                if reader.done():
                    break
            await ws.close()
            await reader
            self.close_code = _close_code(ws)

    async def _turn(
        self,
        ws: ClientConnection,
        mic: _Mic,
        q: Question,
        events: list[Event],
        arrived: asyncio.Event,
        reader: asyncio.Task[None],
    ) -> Turn:
        phase = self.phase
        mark = len(events)
        speech_end_wall = await mic.say(q.pcm, q.speech_end_s)

        def find(kind: type[_E]) -> _E | None:
            return next((e for e in events[mark:] if isinstance(e, kind)), None)

        # The microphone goes on (silence) until the answer is done.
        deadline = time.monotonic() + 60
        while find(ResponseDone) is None and not reader.done() and time.monotonic() < deadline:
            await mic.silence(0.1)
        await mic.silence(0.4)
        heard_event = find(InputTranscriptDone)
        transcript = heard_event.text if heard_event is not None else ""
        created = find(ResponseStarted)
        done = find(ResponseDone)
        rid = created.response_id if created else None
        first_audio = next((e.t for e in events[mark:] if isinstance(e, AudioDelta) and e.response_id == rid), None)
        errors = [e.code for e in events[mark:] if isinstance(e, ErrorEvent)]
        errors += [f"unreadable {e.type}: {e.problem}" for e in events[mark:] if isinstance(e, MalformedEvent)]
        status = done.status.value if done else "none"
        reply = done.text if done else ""
        heard = transcript.lower()
        ok = all(w in heard for w in q.keywords) and status == "completed" and first_audio is not None and not errors
        latency = round((first_audio - speech_end_wall) * 1000, 1) if first_audio is not None else None
        return Turn(phase, q.name, ok, transcript, latency, status, errors, reply)

    def summary(self, phase: str) -> dict[str, Any]:
        turns = [t for t in self.turns if t.phase == phase]
        return {
            "turns": len(turns),
            "ok": sum(t.ok for t in turns),
            "latency_ms": _percentiles([t.latency_ms for t in turns if t.latency_ms is not None]),
            "transcripts": [f"{t.question}: {t.transcript.strip()}" for t in turns],
            "failed": [
                {"question": t.question, "transcript": t.transcript, "status": t.status, "errors": t.errors, "latency_ms": t.latency_ms}
                for t in turns
                if not t.ok
            ],
        }


class _Mic:
    """Real-time audio out in 20 ms chunks on one clock, like a microphone: the client core's
    pacer, without catching up after falling behind (a busy machine: no burst)."""

    def __init__(self, ws: ClientConnection) -> None:
        async def send(pcm: Int16Array) -> None:
            await ws.send(json.dumps(messages.append_audio(pcm)))

        self.pacer = AudioPacer(send, chunk_ms=CHUNK_MS, catch_up=False, start=time.monotonic())
        self.zero = np.zeros(self.pacer.step, dtype=np.int16)

    async def say(self, pcm: Int16Array, speech_end_s: float) -> float:
        """Send ``pcm``; returns when the chunk holding the end of speech was sent."""
        sent_end = time.monotonic()
        sent = await self.pacer.play(pcm)
        k = int(speech_end_s * WIRE_RATE) // self.pacer.step
        return sent[k] if k < len(sent) else sent_end

    async def silence(self, seconds: float) -> None:
        for _ in range(max(1, int(seconds * 1000 / CHUNK_MS))):
            await self.pacer.chunk(self.zero)


# ----------------------------------------------------------------------------- the server


class FuzzedServer(ServeProcess):
    """``voiceagent serve`` on a free loopback port, its whole log kept for the report."""

    def __init__(self, config: str | None, overrides: dict[str, str]) -> None:
        super().__init__(overrides, ("--host", "127.0.0.1", *(("--config", config) if config else ())), wait_ready=False)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"ws://{parts.netloc}"

    def problems(self) -> list[str]:
        """Log lines that show an unhandled exception."""
        pattern = re.compile(r"Traceback|connection handler failed|Task exception was never retrieved|Exception in callback|ERROR")
        return [line.rstrip()[:300] for line in self.lines() if pattern.search(line)]


def metric(base: str, name: str, timeout: float = 10.0) -> float | None:
    """One sample of the server's ``/metrics`` (``name`` with its labels as exposed); None when
    the server does not answer."""
    parts = urlsplit(base)
    try:
        with urllib.request.urlopen(f"http://{parts.hostname}:{parts.port}/metrics", timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sessions_left(base: str, timeout: float) -> tuple[float | None, float]:
    """``voiceagent_sessions_active`` once it is 0, or when ``timeout`` has passed; and the wait."""
    t0 = time.monotonic()
    while True:
        value = metric(base, "voiceagent_sessions_active")
        if value is None or value == 0 or time.monotonic() - t0 > timeout:
            return value, round(time.monotonic() - t0, 1)
        time.sleep(0.5)  # polling the server's own count, with a deadline


def healthz(base: str, timeout: float = 10.0) -> bool:
    parts = urlsplit(base)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# ----------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    overrides = dict(s.split("=", 1) for s in args.set)
    # Room for every hostile client and the good session (the measured capacity of a small machine is one).
    overrides.setdefault("server.max_sessions", str(2 * args.clients + 2))  # hostile, stalled, slow and good ones
    config = load_config(args.config, env={}, overrides={**overrides, "server.port": "0"})
    server: FuzzedServer | None = None
    started = time.monotonic()
    if args.url:
        parts = urlsplit(args.url)
        base = f"{parts.scheme}://{parts.netloc}"
    else:
        print("starting voiceagent serve (models load and warm up: about a minute) ...", file=sys.stderr, flush=True)
        server = FuzzedServer(args.config, overrides)
        base = server.base
    qs = questions()
    stats = Stats()
    good = GoodSession(base, qs)
    good_thread = threading.Thread(target=good.run, args=(args.baseline_turns, args.min_turns), daemon=True)
    t0 = time.monotonic()
    good_thread.start()
    kinds = set(args.scenarios.split(","))
    hostile = Hostile(
        base, args.messages, stats, config.server.max_message_bytes, config.server.audio_burst_s, args.seed, kinds, good.go_on
    )
    hostile.reached = good.target_reached

    async def hostile_main() -> float:
        await asyncio.to_thread(good.baseline_done.wait)
        h0 = time.monotonic()
        stalled = [hostile.stalled_reader(route) for route in ("/v1/realtime", "/twilio") if "stalled_reader" in kinds]
        try:
            await asyncio.gather(*(hostile.client(i, args.rate / args.clients) for i in range(args.clients)), *stalled)
        finally:
            good.hostile_done.set()
        return time.monotonic() - h0

    sys.setswitchinterval(0.001)  # the good session's thread waits less for the GIL
    hostile_s = asyncio.run(hostile_main())
    good_thread.join(300)
    alive = server.alive() if server is not None else None
    health_after = healthz(base)
    # Every hostile connection has ended: the server must count none of them any more (a client
    # that stopped reading, then vanished, once stayed counted and held its admission slot).
    leftover, leftover_wait_s = sessions_left(base, timeout=60.0)
    llm_failed = metric(base, 'voiceagent_errors_total{code="llm_failed"}')
    exit_code = problems = None
    exit_s = None
    if server is not None:
        problems = server.problems()
        stopping = time.monotonic()
        exit_code = server.stop()
        exit_s = round(time.monotonic() - stopping, 1)
    messages = sum(stats.sent.values())
    report: dict[str, Any] = {
        "command": " ".join(["scripts/fuzz_server.py", *sys.argv[1:]]),
        "seed": args.seed,
        "clients": args.clients,
        "rate": args.rate,
        "duration_s": round(time.monotonic() - t0, 1),
        "hostile_s": round(hostile_s, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "server": {
            "url": base,
            "started_by_fuzzer": server is not None,
            "alive_after_run": alive,
            "healthz_after_run": health_after,
            "exit_code_on_sigterm": exit_code,
            "exit_s_after_sigterm": exit_s,
            "drain_s": config.server.drain_s,
            "log_problems": problems,
            "max_message_bytes": config.server.max_message_bytes,
            "audio_burst_s": config.server.audio_burst_s,
        },
        "messages": {
            "hostile": messages,
            "by_category": dict(sorted(stats.sent.items())),
            "valid_frames_around_them": dict(stats.valid_frames),
            "sent_fragmented": stats.fragmented,
            "scenarios": dict(stats.scenarios),
        },
        "realtime": {
            "bad_messages": stats.rt_bad,
            "answered_with_error": stats.rt_bad_answered,
            "missing_error": stats.rt_missing,
            "missing_samples": stats.rt_missing_samples,
            "unverifiable_client_vanished": stats.rt_unverifiable,
            "error_events": stats.rt_errors,
            "error_codes": dict(stats.rt_error_codes.most_common()),
            "valid_messages_refused": dict(stats.rt_valid_errored),
            "audio_rate_errors": stats.rt_rate_errors,
            "bursts_without_rate_error": stats.burst_without_rate_error,
            "largest_error_bytes": stats.rt_error_max_bytes,
            "errors_over_cap": stats.rt_error_oversized,
        },
        "sessions_active_after_run": leftover,
        "sessions_active_wait_s": leftover_wait_s,
        "llm_failed_errors": llm_failed,
        "twilio": {
            "bad_frames": stats.tw_bad,
            "refused_with_close": stats.tw_refused,
            "not_refused": stats.tw_not_refused,
            "not_refused_samples": stats.tw_not_refused_samples,
        },
        "close_codes": dict(sorted(stats.close_codes.items())),
        "close_1011": len(stats.close_1011),
        "close_1011_samples": stats.close_1011[:20],
        "unexpected_closes": dict(stats.unexpected_closes),
        "unexpected_close_samples": stats.unexpected_close_samples,
        "http_answers_to_raw_tcp": dict(sorted(stats.http_answers.items())),
        "client_exceptions": dict(stats.client_exceptions),
        "client_exception_samples": stats.client_exception_samples,
        "healthz_ms": {
            "baseline": _percentiles(good.health["baseline"]),
            "load": _percentiles(good.health["load"]),
            "failures": dict(good.health_failures),
        },
        "good_session": {
            "baseline": good.summary("baseline"),
            "load": good.summary("load"),
            "failure": good.failure,
            "close_code": good.close_code,
        },
    }
    load = report["good_session"]["load"]
    report["invariants"] = {
        "messages_sent": messages >= args.messages,
        "no_1011": not stats.close_1011 and good.close_code != 1011,
        "server_alive": alive is not False and health_after,
        "server_log_clean": not problems,
        "server_exit_0": exit_code in (None, 0),
        "server_exit_in_time": exit_s is None or exit_s <= config.server.drain_s + 5,
        "every_bad_realtime_message_got_an_error": stats.rt_missing == 0 and stats.rt_bad > 0,
        "every_bad_twilio_frame_closed_the_call": stats.tw_not_refused == 0,
        "audio_burst_limited": stats.burst_without_rate_error == 0,
        "close_codes_as_expected": not stats.unexpected_closes,
        "no_scenario_hung_or_cut_short": not stats.client_exceptions,
        "good_turns_completed": good.failure is None and load["turns"] >= args.min_turns and load["ok"] == load["turns"],
        "healthz_answered": not good.health_failures,
        "errors_bounded": not stats.rt_error_oversized,
        "no_session_left_counted": leftover == 0,
        "no_llm_failed": not llm_failed,
    }
    if args.max_latency_ms:
        p50 = load["latency_ms"]["p50"]
        report["invariants"]["good_latency_p50_within_bound"] = p50 is not None and p50 <= args.max_latency_ms
    if args.max_healthz_ms:
        slowest = report["healthz_ms"]["load"]["max"]
        report["invariants"]["healthz_max_within_bound"] = slowest is not None and slowest <= args.max_healthz_ms
    report["ok"] = all(report["invariants"].values())
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000, help="hostile messages to send (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--url", help="fuzz this running server (ws://HOST:PORT) instead of starting one")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "fuzz"), help="folder for fuzz.json")
    ap.add_argument("--config", help="TOML configuration for the server (and the limits the fuzzer aims past)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="server setting (repeatable)")
    ap.add_argument("--clients", type=int, default=4, help="hostile clients at once")
    ap.add_argument("--rate", type=float, default=200.0, help="frames a second the hostile clients send together (0: no limit)")
    ap.add_argument("--baseline-turns", type=int, default=2, help="good turns before the hostile load starts")
    ap.add_argument("--min-turns", type=int, default=2, help="good turns under load, at least")
    ap.add_argument("--max-latency-ms", type=float, help="fail when the good session's p50 under load is slower")
    ap.add_argument("--max-healthz-ms", type=float, help="fail when a /healthz probe under load is slower")
    every = ",".join([*SCENARIOS, "stalled_reader"])
    ap.add_argument("--scenarios", default=every, help=f"hostile scenarios to run (default all: {every})")
    args = ap.parse_args(argv)
    report = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, ensure_ascii=False)
    (out / "fuzz.json").write_text(text + "\n")
    print(text)
    failed = [k for k, v in report["invariants"].items() if not v]
    verdict = "ok" if not failed else "FAILED: " + ", ".join(failed)
    print(f"fuzz: {verdict} ({report['messages']['hostile']} hostile messages, {report['duration_s']} s)", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
