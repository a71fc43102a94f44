"""Seeded ``/twilio`` Media Streams frames: a valid call's, and one bad frame of a category to end it."""

from __future__ import annotations

import json
import os
import random
from typing import Any

import numpy as np

from benchmarks.fuzz.frames import RAW, b64, edge_depth, raw
from voiceagent.audio import mulaw_encode


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
                                "start": {"streamSid": "MZ2", "mediaFormat": {"encoding": "audio/x-alaw", "sampleRate": "8000"}},
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
