"""Spoken sessions played to a real server at once: each session one WAV of questions (the
fixtures of ``scripts/make_fixtures.py``) at real-time pace, one question per slot
(concurrency.py, cache.py, soak.py).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import numpy as np

from scripts import make_fixtures
from voiceagent.audio import read_wav, resample, write_wav
from voiceagent.replay import TurnResult, replay_file, speech_turns

__all__ = ["QUESTIONS", "arrivals", "run_n", "session_files"]

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
# Questions whose transcripts Whisper tiny gets right, in several voices.
QUESTIONS = ("long_question", "colour", "weather", "count", "short", "pause_sun", "pause_animal", "pause_mid")


def session_files(
    n: int,
    turns: int,
    slot_s: float,
    arrangement: str,
    rng: random.Random,
    workdir: Path,
    questions: tuple[str, ...] = QUESTIONS,
    lead_s: float = 0.0,
    arrive: bool = False,
) -> list[Path]:
    """One WAV per session: ``lead_s`` of silence, then ``turns`` questions (fixture names, in
    rotation), turn k's speech ending 6 s into slot k for all sessions (simultaneous), at a random
    point of those first 6 s (staggered), or at such a point after session i's own phase of
    ``i * slot_s / n`` (spread: callers who are not in step, each speaking once a slot).  With
    ``arrive`` the phase is not in the file: the caller connects at its phase instead
    (:func:`arrivals`), as callers do."""
    fixtures = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    files = []
    for i in range(n):
        phase = i * slot_s / n if arrangement == "spread" and not arrive else 0.0
        out = np.zeros(int((lead_s + phase + turns * slot_s) * RATE), dtype=np.int16)
        for k in range(turns):
            name = questions[(i + k * 3) % len(questions)]
            pcm, rate = read_wav(fixtures[name])
            pcm = resample(pcm, rate, RATE)
            start_s, end_s = speech_turns(pcm, RATE)[0][0], speech_turns(pcm, RATE)[-1][1]
            speech = pcm[int(start_s * RATE) : int(end_s * RATE) + RATE // 100]
            latest = 6.0  # s into its slot: every question (at most 5 s) ends by then
            end = lead_s + phase + k * slot_s + (latest if arrangement == "simultaneous" else rng.uniform(len(speech) / RATE + 0.3, latest))
            a = int(end * RATE) - len(speech)
            out[a : a + len(speech)] = speech
        path = workdir / f"{arrangement}-n{n}-s{i}.wav"
        write_wav(path, out, RATE)
        files.append(path)
    return files


def arrivals(n: int, slot_s: float, arrangement: str, arrive: bool) -> list[float]:
    """When each of ``n`` callers connects, seconds after the first (0 for all unless ``arrive``)."""
    return [i * slot_s / n if arrive and arrangement == "spread" else 0.0 for i in range(n)]


async def run_n(
    url: str, files: list[Path], session: dict[str, Any] | None = None, delays: list[float] | None = None
) -> tuple[list[TurnResult], list[str], int]:
    """Play every session's file over its own connection, all at once or each after its delay
    (``session``: more ``session.update`` fields each sends first).  Returns the turns (their
    ``speech_end_s`` counted from the first connection), the errors, and how many connections the
    server refused with 503 (admission; not errors)."""
    from websockets.exceptions import InvalidStatus

    async def one(path: Path, delay: float) -> list[TurnResult]:
        await asyncio.sleep(delay)  # the caller's arrival time, not a wait for anything
        turns = await replay_file(url, path, timeout_s=60.0, turn_gap_s=3.0, session=session)
        for t in turns:
            t.speech_end_s += delay
        return turns

    waits = delays or [0.0] * len(files)
    results = await asyncio.gather(*(one(f, d) for f, d in zip(files, waits, strict=True)), return_exceptions=True)
    turns: list[TurnResult] = []
    errors: list[str] = []
    refused = 0
    for r in results:
        if isinstance(r, InvalidStatus) and r.response.status_code == 503:
            refused += 1
        elif isinstance(r, BaseException):
            errors.append(f"{type(r).__name__}: {r}")
        else:
            turns.extend(r)
    return turns, errors, refused
