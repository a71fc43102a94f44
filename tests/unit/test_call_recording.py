"""transports.call_recording: a call's two channels line up on the session's clock, the transcript
holds each turn with its timings, the files are private to the server's user, and old recordings
go (a virtual clock, no models)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from voiceagent.clock import VirtualClock
from voiceagent.errors import ConfigError
from voiceagent.events import (
    AudioDelta,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDone,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    TurnMetrics,
)
from voiceagent.transports.call_recording import CallRecorder, check_folder, prune

HEAD = {"t": 0.0, "gen": 0, "session": "sess_1"}


def test_the_agent_is_placed_when_it_was_sent_and_the_transcript_has_each_turn(tmp_path: Path) -> None:
    clock = VirtualClock()
    rec = CallRecorder(tmp_path / "calls", "rtc_abc", clock, clock.now())
    second = np.full(16000, 1000, dtype=np.int16)
    rec.caller(second)  # the caller speaks for a second
    rec.event(InputSpeechStarted(**HEAD, item_id="u1", audio_ms=100.0))
    rec.event(InputSpeechStopped(**HEAD, item_id="u1", audio_ms=900.0))
    rec.event(InputTranscriptDone(**HEAD, item_id="u1", text="What time is it?"))
    clock.advance(1.5)
    rec.caller(np.zeros(8000, dtype=np.int16))
    rec.event(ResponseCreated(**HEAD, response_id="r1", item_id="a1"))
    half_second = np.full(12000, 2000, dtype=np.int16)  # at 24 kHz
    rec.event(AudioDelta(**{**HEAD, "t": clock.now()}, response_id="r1", item_id="a1", pcm=half_second, rate=24000, offset_ms=0.0))
    rec.event(ResponseDone(**HEAD, response_id="r1", item_id="a1", status=ResponseStatus.COMPLETED, text="It is noon."))
    rec.event(TurnMetrics(**HEAD, response_id="r1", spans={"first_audio_sent": 600.0}))
    wav_path, json_path = asyncio.run(rec.save())

    with wave.open(str(wav_path)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (2, 16000, 2)
        frames = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, 2)
    caller, agent = frames[:, 0], frames[:, 1]
    assert np.all(caller[:16000] == 1000) and np.all(caller[16000:24000] == 0)
    loud = np.flatnonzero(np.abs(agent) > 500)
    assert 24000 <= loud[0] < 24000 + 200  # sent 1.5 s into the call: it starts there, beside the caller's audio
    assert abs(len(loud) - 8000) < 400  # half a second, resampled from 24 to 16 kHz (the stream's delay aside)
    assert wav_path.name.startswith("call-rtc_abc-") and json_path.name == wav_path.with_suffix(".json").name
    transcript = json.loads(json_path.read_text())
    assert transcript["channels"] == ["caller", "agent"] and transcript["call_id"] == "rtc_abc"
    user, agent_turn = transcript["turns"]
    assert (user["role"], user["text"], user["start_ms"], user["end_ms"]) == ("caller", "What time is it?", 100.0, 900.0)
    assert (agent_turn["role"], agent_turn["text"], agent_turn["status"], agent_turn["start_ms"]) == (
        "agent",
        "It is noon.",
        "completed",
        1500.0,
    )
    assert agent_turn["spans_ms"] == {"first_audio_sent": 600.0}
    # Nothing leaves the machine, and on it the server's user alone reads them.
    assert stat.S_IMODE(os.stat(tmp_path / "calls").st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (wav_path, json_path)} == {0o600}


def test_agent_chunks_sent_ahead_of_their_time_follow_each_other(tmp_path: Path) -> None:
    clock = VirtualClock()
    rec = CallRecorder(tmp_path, "c", clock, clock.now())
    chunk = np.full(1600, 3000, dtype=np.int16)  # 100 ms at 16 kHz, sent faster than it plays
    for _ in range(3):
        rec.event(AudioDelta(**HEAD, response_id="r", item_id="a", pcm=chunk, rate=16000, offset_ms=0.0))
    wav_path, _ = asyncio.run(rec.save())
    with wave.open(str(wav_path)) as w:
        agent = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, 2)[:, 1]
    assert len(agent) == 4800 and np.all(agent == 3000)  # one after the other, none written over
    with pytest.raises(FileExistsError):
        asyncio.run(rec.save())  # the same recording again: never written over


def test_prune_deletes_only_recordings_past_their_time(tmp_path: Path) -> None:
    now = time.time()
    old = [tmp_path / "call-a-1.wav", tmp_path / "call-a-1.json"]
    new = [tmp_path / "call-b-2.wav", tmp_path / "call-b-2.json"]
    others = [tmp_path / "notes.txt", tmp_path / "eval_set.json"]  # old, but not recordings: kept
    for path in [*old, *new, *others]:
        path.write_text("x")
    for path in [*old, *others]:
        os.utime(path, (now - 40 * 86400, now - 40 * 86400))
    assert prune(tmp_path, 30, now) == 2
    assert [p.exists() for p in old] == [False, False] and all(p.exists() for p in [*new, *others])
    assert prune(tmp_path / "missing", 30, now) == 0


def test_a_recordings_folder_the_server_cannot_make_is_one_line(tmp_path: Path) -> None:
    check_folder(tmp_path / "calls" / "2026")  # made, with its parents
    assert (tmp_path / "calls" / "2026").is_dir()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ConfigError) as err:
        check_folder(blocker / "calls")
    assert err.value.message.startswith(f"server.recordings_dir: cannot make {blocker / 'calls'}")
    assert "\n" not in err.value.message
