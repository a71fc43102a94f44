"""The pure parts of benchmarks/eval_stt.py and benchmarks/common/stt.py: configuration specs, how a
question's clip is padded, and the report.  No models: the speech comes from a stand-in speaker."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks import eval_stt as es
from benchmarks.common import stt
from benchmarks.common.questions import Question
from benchmarks.common.speech import RATE, Voice


def test_a_config_is_model_beam_and_an_optional_prompt() -> None:
    assert stt.parse_config("whisper-base@5") == stt.SttConfig("whisper-base", 5)
    history = stt.parse_config("whisper-tiny@1+history")
    assert (history.prompt, history.label) == ("history", "whisper-tiny@1+history")
    assert stt.parse_config("whisper-base@1+Hello, there.").prompt == "Hello, there."  # a literal text keeps its punctuation
    for bad in ("whisper-base", "whisper-base@0", "@2", "whisper-base@x"):
        with pytest.raises(ValueError, match="MODEL@BEAM"):
            stt.parse_config(bad)


class _Speaker:
    """One second of a constant per part, so the test can find each part in the clip."""

    def speak(self, text: str, voice: Any) -> bytes:
        level = 1000 + len(text)
        return np.full(RATE, level, dtype=np.int16).tobytes()


def test_a_clip_is_padded_as_the_stage_pads_a_segment_and_keeps_the_questions_pause() -> None:
    plain = Question("q1", "What is two plus two?", ("four",), "arithmetic")
    paused = Question("q2", "Tell me the capital | of France.", ("Paris",), "facts", pause_ms=700)
    items = stt.clips([plain, paused], [Voice("espeak", "en-us+m3")], _Speaker(), seed=0)
    by_id = {q.id: (conv, voice, audio) for conv, voice, q, audio in items}
    assert set(by_id) == {"q1", "q2"} and all(v == "espeak:en-us+m3" for _c, v, _a in by_id.values())
    pre, tail, pause = int(stt.PRE_S * RATE), int(stt.TAIL_S * RATE), int(0.7 * RATE)
    audio = by_id["q1"][2]
    assert len(audio) == pre + RATE + tail
    assert not audio[:pre].any() and not audio[-tail:].any() and audio[pre : pre + RATE].all()
    audio = by_id["q2"][2]
    assert len(audio) == pre + RATE + pause + RATE + tail
    gap = audio[pre + RATE : pre + RATE + pause]
    assert not gap.any()  # the mid-sentence pause is silence between the two halves
    first, second = audio[pre], audio[pre + RATE + pause]
    assert first != second  # each half is its own speech (levels differ by text length)


def _result(label: str, heard: list[tuple[str, int]]) -> dict[str, Any]:
    rows = [
        {"voice": "piper:joe", "question": f"q{i}", "said": "What is two plus two?", "heard": h, "errors": e}
        for i, (h, e) in enumerate(heard)
    ]
    return {
        "config": label,
        "wer": 0.1,
        "wer_by_voice": {"piper:joe": 0.1},
        "decode_ms_p50": 80.0,
        "decode_ms_p95": 100.0,
        "loops": 0,
        "clips": len(rows),
        "rows": rows,
    }


def test_the_report_counts_which_transcripts_a_config_changed_for_better_or_worse() -> None:
    report = {
        "machine": "2 cores",
        "command": "python -m benchmarks.eval_stt",
        "questions": 3,
        "voice_notes": [],
        "results": [
            _result("whisper-tiny@1", [("What is two plus two?", 0), ("What is to plus two?", 1), ("What is two plus two?", 0)]),
            _result("whisper-base@5", [("What is two plus two?", 0), ("What is two plus two?", 0), ("What is two plus too?", 1)]),
        ],
    }
    text = es.markdown(report)
    assert "| whisper-base@5 | 10.0 | 10.0 | 80 | 100 | 0 |" in text
    assert "2 transcripts differ, 1 better, 1 worse" in text
    assert "| piper:joe | What is two plus two? | What is to plus two? | What is two plus two? |" in text


# ----------------------------------------------------------------------------- --cut vad


class _Vad:
    threshold, min_speech_ms, stop_ms, prefix_padding_ms = 0.5, 96, 160, 300


def _probs(edge: int, pattern: list[tuple[float, int]]) -> list[float]:
    """Window probabilities: ``edge`` silent windows, ``pattern``'s (probability, windows), ``edge`` more."""
    return [0.0] * edge + [p for p, n in pattern for _ in range(n)] + [0.0] * edge


def test_vad_cuts_pad_each_segment_as_the_stage_does_and_a_long_gap_splits_the_question() -> None:
    edge = int(stt.EDGE_S * 1000 / 32)  # 31 windows of 32 ms: the silence added on either side
    speech = np.arange(int(2.0 * RATE), dtype=np.float32)  # the values tell where a cut came from
    lead = int(stt.EDGE_S * RATE)
    # 20 windows of speech, 10 of silence (320 ms: past stop_ms), 15 of speech
    full = stt.with_edges(speech)
    assert len(full) == 2 * lead + len(speech) and not full[:lead].any() and not full[-lead:].any()
    cuts = stt.vad_cuts(full, _probs(edge, [(0.9, 20), (0.0, 10), (0.9, 15)]), 32.0, _Vad())
    starts = [edge * 32.0, (edge + 30) * 32.0]
    ends = [(edge + 20) * 32.0, (edge + 45) * 32.0]
    assert [(a, b) for a, b, _ in cuts] == [(s - 300.0, e + 96.0) for s, e in zip(starts, ends, strict=True)]
    for a, b, audio in cuts:
        first = int(a * RATE / 1000)
        assert len(audio) == int(b * RATE / 1000) - first
        inside = audio[lead - first :] if first < lead else audio
        assert inside[0] == max(0, first - lead)  # the cut starts where it says, in the question's own samples
    # a 96 ms dip (under stop_ms) does not split it
    one = stt.vad_cuts(full, _probs(edge, [(0.9, 20), (0.0, 3), (0.9, 15)]), 32.0, _Vad())
    assert [(a, b) for a, b, _ in one] == [(edge * 32.0 - 300.0, (edge + 38) * 32.0 + 96.0)]


def test_a_split_question_is_transcribed_again_as_one_clip_and_its_halves_are_kept() -> None:
    line = np.arange(4000 * 16, dtype=np.float32)
    cuts = [(0.0, 1500.0, line[: 1500 * 16]), (1300.0, 2600.0, line[1300 * 16 : 2600 * 16])]
    heard: list[int] = []

    def transcribe(audio: np.ndarray) -> str:
        heard.append(len(audio))
        return {1500 * 16: "How many wheels", 1300 * 16: "does a bicycle have?"}.get(len(audio), "How many wheels does a bicycle have?")

    text, alone = stt.rejoined_text(cuts, transcribe)
    assert (text, alone) == ("How many wheels does a bicycle have?", ["How many wheels", "does a bicycle have?"])
    assert heard == [1500 * 16, 1300 * 16, 2600 * 16]  # the rejoin hears the turn once, overlap not repeated
    # a first segment heard as nothing is noise: nothing to join the second to
    text, alone = stt.rejoined_text(cuts, lambda a: "" if len(a) == 1500 * 16 else "does a bicycle have?")
    assert (text, alone) == ("does a bicycle have?", ["", "does a bicycle have?"])
