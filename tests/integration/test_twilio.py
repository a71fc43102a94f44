"""The Twilio Media Streams bridge, end to end: real models, a real server, a scripted phone call.

The caller (clients/twilio_call.py) behaves as Twilio does: 20 ms μ-law frames in real time with
string-typed numbers, and marks echoed only once the audio before them has played.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import urllib.request
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from clients.twilio_call import FakeTwilioCall
from tests.profile import profile_config
from voiceagent.audio import read_wav, resample
from voiceagent.config import Config, PlayoutConfig, ServerConfig
from voiceagent.conversation.history import AssistantItem, UserItem
from voiceagent.conversation.interruption import PARTIAL_AFTER_S
from voiceagent.replay import speech_turns
from voiceagent.session import Session
from voiceagent.stages.stt import JUDGING_INTERVAL_MS
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

SCALE = float(__import__("os").environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))


def _config(*, lead_ms: int | None = None, **server: Any) -> Config:
    cfg = dataclasses.replace(profile_config(), server=ServerConfig(port=0, **server))
    if lead_ms is None:
        return cfg
    # Barge-in: a long reply, so the agent is still talking when the caller interrupts.
    story = "You are a storyteller. Always answer with a long story of at least six sentences."
    return dataclasses.replace(
        cfg, playout=PlayoutConfig(lead_ms=lead_ms), llm=dataclasses.replace(cfg.llm, instructions=story, max_tokens=160)
    )


def _twilio_url(server: VoiceAgentServer) -> str:
    return f"ws://127.0.0.1:{server.port}/twilio"


def _only_session(server: VoiceAgentServer) -> Session:
    assert len(server.sessions) == 1, f"expected one live session, found {len(server.sessions)}"
    return next(iter(server.sessions))


def _words(text: str) -> set[str]:
    return {w.strip(".,!?;:'\"").lower() for w in text.split() if len(w.strip(".,!?;:'\"")) > 2}


def _frame_time(call: Any, first_frame: int, offset_s: float) -> float:
    """Wall time at which the caller sent the frame ``offset_s`` into an utterance (or now, if not yet)."""
    index = first_frame + int(offset_s / 0.02)
    return call.frame_times[index] if index < len(call.frame_times) else time.monotonic()


def test_twilio_call_gets_a_spoken_answer(engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path) -> None:
    """...and is recorded (``server.recordings_dir``): both voices, and the transcript."""
    pcm, rate = read_wav(speech["capital"])
    recordings = tmp_path / "recordings"

    async def scenario() -> tuple[Any, Session]:
        async with (
            VoiceAgentServer(_config(recordings_dir=str(recordings)), engines) as server,
            FakeTwilioCall(_twilio_url(server)) as call,
        ):
            await call.say(pcm, rate)

            def done() -> bool:
                # The reply has ended on the server and the phone has played all of it: a pause
                # between clauses on a loaded machine is not the end (the quiet alone once was).
                replies = [i for s in server.sessions for i in s.history.items if isinstance(i, AssistantItem)]
                ended = bool(replies) and replies[0].status != "in_progress"
                return ended and call.marks_echoed == call.marks_sent and call.quiet_for(0.5)

            await call.wait_until(done, 60 * SCALE)
            return call, _only_session(server)

    call, session = run(scenario(), timeout=90)
    users = [i for i in session.history.items if isinstance(i, UserItem)]
    replies = [i for i in session.history.items if isinstance(i, AssistantItem)]
    assert users and {"capital", "france"} & _words(users[0].text), users
    assert replies and replies[0].status == "completed" and replies[0].text, replies
    reply = replies[0]
    # All of the reply reached the phone and played: every mark came back, nothing was cleared.
    assert call.clears == []
    assert call.marks_sent > 0 and call.marks_echoed == call.marks_sent
    assert abs(call.received_ms - reply.audio_ms) < 60, (call.received_ms, reply.audio_ms)
    assert reply.heard_ms is None
    # The audio really is the reply: transcribing what the handset played finds its words.
    heard = call.heard_audio()
    assert len(heard) / 8000 > 0.5
    text = engines.stt.transcribe((resample(heard, 8000, 16000).astype(np.float32) / 32768.0).astype(np.float32), "en")
    assert _words(text) & _words(reply.text), (text, reply.text)
    # The recording: one call, the caller on the left and the agent on the right, after the question.
    [wav_path] = recordings.glob("*.wav")
    with wave.open(str(wav_path)) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, 2)
    caller_loud, agent_loud = (np.flatnonzero(np.abs(frames[:, ch]) > 1000) for ch in (0, 1))
    assert len(caller_loud) and len(agent_loud) and agent_loud[0] > caller_loud[-1], (caller_loud[-1:], agent_loud[:1])
    transcript = json.loads(wav_path.with_suffix(".json").read_text())
    roles = [(t["role"], t["text"]) for t in transcript["turns"]]
    assert roles[0] == ("caller", users[0].text) and ("agent", reply.text) in roles, roles


HEARD_BEFORE_BARGE_IN_MS = 300
WORDS_DECODE_S = 0.4  # Whisper's decode of a partial under a second long, with margin for a busy machine
UNPLAYED_AT_BARGE_IN_MS = 1500


# Alone, like the other barge-ins that need the voice ahead of its playback: beside two workers'
# models a run once reached the interruption with the story's one sentence all played, and the
# history was not cut (heard_ms None).
@pytest.mark.serial
def test_twilio_barge_in_clears_and_cuts_history_to_played_audio(engines: Any, speech: dict[str, Path], run: Callable[..., Any]) -> None:
    question, q_rate = read_wav(speech["long_story"])
    interruption, i_rate = read_wav(speech["capital"])
    backchannel, b_rate = read_wav(speech["backchannel"])
    onset_s, speech_end_s = speech_turns(interruption, i_rate)[0]  # the fixture has silence around its speech
    # In the default ``words`` mode the caller's words decide: speech starts after min_speech_ms;
    # its words are known from the partial transcript after PARTIAL_AFTER_S of it (partials come
    # every JUDGING_INTERVAL_MS) or from its final one, at the end of the sentence, if sooner.
    cfg = profile_config()
    words_known_s = min(PARTIAL_AFTER_S + JUDGING_INTERVAL_MS / 1000.0, speech_end_s - onset_s + cfg.vad.stop_ms / 1000.0)
    decide_s = cfg.vad.min_speech_ms / 1000.0 + words_known_s + WORDS_DECODE_S
    # The reply is paused from the interruption's first sound until its words decide, and the
    # phone plays what it holds meanwhile: it must hold more than that when the caller starts, or
    # a loaded machine (a slow story, little sent ahead) leaves nothing unplayed to cut.
    unplayed_ms = max(UNPLAYED_AT_BARGE_IN_MS, (onset_s + decide_s) * 1000.0 + 500.0)

    async def scenario() -> dict[str, Any]:
        # A long playout lead: the phone holds audio it has not played yet when the caller barges
        # in, however fast the LLM is today, so there is always something the cut must remove.
        async with VoiceAgentServer(_config(lead_ms=5000), engines) as server, FakeTwilioCall(_twilio_url(server)) as call:
            await call.say(question, q_rate)
            # A caller who talks over the agent soon after its answer starts playing, while the phone
            # still holds well over the barge-in window's worth of unplayed answer (on a slow machine
            # the first clause alone may have played out before the second exists).
            await call.wait_until(
                lambda: call.heard_ms >= HEARD_BEFORE_BARGE_IN_MS and call.received_ms - call.heard_ms >= UNPLAYED_AT_BARGE_IN_MS,
                60 * SCALE,
            )
            # First a backchannel ("Yeah, yeah. Right."): the answer pauses while it is judged,
            # then goes on; the phone is not cleared and the caller's words make no turn.
            session = _only_session(server)
            await call.say(backchannel, b_rate)
            await call.wait_until(lambda: session.turn.dropped >= 1 and not session.replies.core.floor.judging(), 20 * SCALE)
            clears_after_backchannel = len(call.clears)
            await call.wait_until(lambda: call.received_ms - call.heard_ms >= unplayed_ms, 60 * SCALE)
            started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            said = asyncio.create_task(call.say(interruption, i_rate, started))
            first_frame = await started
            await call.wait_until(lambda: bool(call.clears), 20 * SCALE)
            clear_wall = call.clears[0]
            await said
            item = next(i for i in session.history.items if isinstance(i, AssistantItem))
            # The session cuts the item to its own estimate with the clear; the transport then cuts it
            # to what the handset's marks say was played: wait for that second figure.
            await call.wait_until(lambda: item.heard_by_client, 20 * SCALE)
            cut = {"heard_ms": item.heard_ms, "audio_ms": item.audio_ms, "text": item.text, "full": item.full_text}

            # The conversation goes on: the interruption is answered (with a long lead its reply may
            # arrive in one burst, even before the interruption's trailing silence has been sent).
            def answered() -> bool:
                items = [i for i in session.history.items if isinstance(i, AssistantItem)]
                return len(items) >= 2 and items[-1].status == "completed" and call.quiet_for(1.0)

            await call.wait_until(answered, 60 * SCALE)
            return {
                "cut": cut,
                # Marks the handset echoed as played before the `clear` reached it: (seconds before
                # the clear, position).
                "played_marks": [(round(clear_wall - t, 3), ms) for t, ms in call.played_marks if t <= clear_wall],
                # On the audio's own timeline: speech frames the caller had sent when `clear` came.
                "clear_after_s": (call.clear_frames[0] - first_frame) * 0.02 - onset_s,
                "heard_at_clear": call.heard_ms_at_clear[0],
                # Until the interruption's last word, any audio could only be the interrupted answer.
                "stale_media": [
                    round(t - clear_wall, 3) for t in call.media_times if clear_wall < t <= _frame_time(call, first_frame, speech_end_s)
                ],
                "clears": len(call.clears),
                "clears_after_backchannel": clears_after_backchannel,
                "users": [i.text for i in session.history.items if isinstance(i, UserItem)],
                "replies": [i.text for i in session.history.items if isinstance(i, AssistantItem)],
            }

    r = run(scenario(), timeout=150)
    cut = r["cut"]
    # `clear` came promptly: once the first words were transcribed, plus VAD and resampler
    # buffering and one 100 ms playout chunk, of the caller starting to speak.
    assert 0 < r["clear_after_s"] < decide_s + 0.5 * SCALE, r
    # After the clear, no audio of the interrupted answer reached the phone.
    assert r["stale_media"] == [], r
    assert r["clears"] == 1 and r["clears_after_backchannel"] == 0, r
    assert not any("yeah" in u.lower() for u in r["users"]), r["users"]  # the backchannel made no turn
    # The stored assistant turn is cut to exactly what the marks say was played: a position the
    # handset echoed as played (not the session's own estimate, not a mark the clear discarded).
    assert cut["heard_ms"] is not None and cut["heard_ms"] < cut["audio_ms"] - 200, cut
    assert any(abs(cut["heard_ms"] - ms) < 2 for _ago, ms in r["played_marks"]), (cut, r["played_marks"])
    # Every played mark the cut leaves out crossed the `clear` on the wire: the handset echoed it
    # after the server had cut, before the clear reached it.  No protocol can tell the server of
    # those (Twilio echoes the discarded marks too, indistinguishably), so the cut may be short by
    # them; a mark echoed well before the clear, though, must be counted.
    missed = [(ago, ms) for ago, ms in r["played_marks"] if ms > cut["heard_ms"] + 2]
    assert all(ago < 0.5 * SCALE for ago, _ms in missed), (cut, missed)
    assert r["heard_at_clear"] >= HEARD_BEFORE_BARGE_IN_MS
    assert len(cut["text"]) < len(cut["full"]) and cut["full"].startswith(cut["text"].split(" ")[0]), cut
    assert len(r["replies"]) >= 2 and r["replies"][-1], r["replies"]


def test_twiml_document(engines: Any, run: Callable[..., Any]) -> None:
    async def fetch(server: VoiceAgentServer, host: str | None = None) -> tuple[str, str]:
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/twilio/twiml")
        if host:
            req.add_header("Host", host)
            req.add_header("X-Forwarded-Proto", "https")

        def get() -> tuple[str, str]:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.headers["Content-Type"], resp.read().decode()

        return await asyncio.to_thread(get)

    async def scenario() -> list[tuple[str, str]]:
        async with (
            VoiceAgentServer(_config(), engines) as derived,
            VoiceAgentServer(_config(public_url="https://voice.example.com/"), engines) as fixed,
        ):
            return [await fetch(derived, "abc123.ngrok.app"), await fetch(fixed)]

    (ctype, body), (ctype2, body2) = run(scenario(), timeout=20)
    assert ctype.startswith("text/xml") and ctype2.startswith("text/xml")
    connect = '<Connect action="/twilio/twiml/next" method="GET">'
    assert f'<Response>{connect}<Stream url="wss://abc123.ngrok.app/twilio"/></Connect></Response>' in body
    assert '<Stream url="wss://voice.example.com/twilio"/>' in body2


BAD_FRAMES: list[tuple[str, list[str | bytes], int, str]] = [
    ("not json", ["{nope"], 1008, "invalid_json"),
    ("media before start", [json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": ""}})], 1008, "not_started"),
    ("unknown event", [json.dumps({"event": "connected"}), json.dumps({"event": "bogus", "streamSid": "MZ1"})], 1008, "unknown_event"),
    ("binary frame", [b"\x00\x01"], 1003, "binary"),
    (
        "wrong format",
        [
            json.dumps(
                {
                    "event": "start",
                    "sequenceNumber": "1",
                    "start": {"streamSid": "MZ1", "mediaFormat": {"encoding": "audio/x-alaw", "sampleRate": "8000"}},
                }
            )
        ],
        1008,
        "unsupported_format",
    ),
]
START = json.dumps(
    {"event": "start", "sequenceNumber": "1", "streamSid": "MZ1", "start": {"streamSid": "MZ1", "callSid": "CA1", "tracks": ["inbound"]}}
)
BAD_FRAMES += [
    (
        "bad base64",
        [START, json.dumps({"event": "media", "sequenceNumber": "2", "streamSid": "MZ1", "media": {"payload": "!!not base64!!"}})],
        1008,
        "invalid_audio",
    ),
    (
        "bad sequence number",
        [START, json.dumps({"event": "mark", "sequenceNumber": "two", "streamSid": "MZ1", "mark": {"name": "x"}})],
        1008,
        "sequenceNumber",
    ),
    (
        "mark never sent",
        [START, json.dumps({"event": "mark", "sequenceNumber": "2", "streamSid": "MZ1", "mark": {"name": "x"}})],
        1008,
        "unknown_mark",
    ),
    ("another stream", [START, json.dumps({"event": "dtmf", "streamSid": "MZ2", "dtmf": {"digit": "1"}})], 1008, "wrong_stream"),
]


def test_malformed_twilio_frames_close_that_call_only(engines: Any, speech: dict[str, Path], run: Callable[..., Any]) -> None:
    pcm, rate = read_wav(speech["capital"])

    async def scenario() -> tuple[list[tuple[str, int | None, str]], bool, int]:
        results = []
        async with VoiceAgentServer(
            _config(max_sessions=2), engines
        ) as server:  # the bystander and each bad call: not the capacity under test
            url = _twilio_url(server)
            async with connect(url) as bystander:  # another call, open throughout
                await bystander.send(START)
                for name, frames, _, _ in BAD_FRAMES:
                    async with connect(url) as ws:
                        for frame in frames:
                            await ws.send(frame)
                        with contextlib.suppress(ConnectionClosed):
                            await asyncio.wait_for(ws.recv(), 10 * SCALE)
                        results.append((name, ws.close_code, ws.close_reason or ""))
                await bystander.send(json.dumps({"event": "dtmf", "streamSid": "MZ1", "dtmf": {"track": "inbound_track", "digit": "5"}}))
                await bystander.ping()
                bystander_alive = bystander.close_code is None
            # And a proper call after all that still gets an answer.
            async with FakeTwilioCall(url) as call:
                await call.say(pcm, rate)
                await call.wait_until(lambda: call.quiet_for(1.0), 60 * SCALE)
            return results, bystander_alive, len(call.segments)

    results, bystander_alive, segments = run(scenario(), timeout=120)
    for (name, code, reason), (_, _, want_code, want_reason) in zip(results, BAD_FRAMES, strict=True):
        assert code == want_code, (name, code, reason)
        assert want_reason in reason, (name, reason)
    assert bystander_alive
    assert segments > 0
