"""benchmarks/common/noise.py: noise mixed at the SNR it is asked for, measured as the module
says (the speech's voiced frames against the whole noise), and the noise specs parsed."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common.noise import mix, parse, voiced_rms

RATE = 16000


def test_the_mix_holds_the_asked_snr_over_the_speechs_voiced_frames() -> None:
    t = np.arange(RATE) / RATE
    speech = np.concatenate([np.zeros(RATE, np.int16), (np.sin(2 * np.pi * 200 * t) * 6000).astype(np.int16), np.zeros(RATE, np.int16)])
    rng = np.random.default_rng(5)
    noise = (rng.standard_normal(RATE // 2) * 1000).astype(np.int16)  # shorter than the speech: looped
    for snr in (0.0, 5.0, 10.0):
        mixed = mix(speech, noise, RATE, snr)
        assert len(mixed) == len(speech)
        bed = mixed.astype(np.float64) - speech
        measured = 20 * np.log10(voiced_rms(speech, RATE) / np.sqrt(np.mean(bed**2)))
        assert abs(measured - snr) < 0.2, (snr, measured)


def test_the_voiced_level_ignores_the_silence_between_questions() -> None:
    tone = (np.sin(np.arange(RATE) * 2 * np.pi * 300 / RATE) * 8000).astype(np.int16)
    padded = np.concatenate([np.zeros(RATE * 5, np.int16), tone])
    assert voiced_rms(padded, RATE) == pytest.approx(voiced_rms(tone, RATE), rel=0.01)


@pytest.mark.parametrize(("spec", "parsed"), [("babble5", ("babble", 5.0)), ("street0", ("street", 0.0)), ("music10", ("music", 10.0))])
def test_noise_specs_are_parsed(spec: str, parsed: tuple[str, float]) -> None:
    assert parse(spec) == parsed


@pytest.mark.parametrize("spec", ["mulaw", "g722", "babble", "rain5", ""])
def test_what_is_not_a_noise_is_none(spec: str) -> None:
    assert parse(spec) is None


def test_the_benchmark_pairs_each_condition_off_and_on() -> None:
    from benchmarks.noise import ON, conditions, table

    names = conditions("fast", ["babble"], ["0", "10"])
    assert names == ["fast", "fast" + ON, "fast@babble0", "fast@babble0" + ON, "fast@babble10", "fast@babble10" + ON]
    entry = {
        "summary": {"accuracy_pct": 50.0, "answered": 2, "questions": 2, "wer_pct": 10.0, "latency_ms": {"p50": 700.0, "p95": 900.0}},
        "responses": {"replies": 3, "cut": 1, "unasked": 1},
    }
    rows = table({"profiles": {n: entry for n in names[:4]}})
    assert list(rows) == ["clean", "babble0"]
    assert rows["babble0"]["on"] == {
        "right": 50.0,
        "answered": "2/2",
        "wer_pct": 10.0,
        "replies_cut": 1,
        "unasked": 1,
        "p50_ms": 700.0,
        "p95_ms": 900.0,
    }
