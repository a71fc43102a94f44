#!/usr/bin/env python3
"""Spoken quality evaluation: everyday questions asked aloud to the real server, per profile.

The questions (``benchmarks/eval_questions.toml``: facts, arithmetic, reminders, small talk and
follow-ups that need the previous turn, each with its acceptable answer words, a category, and a
quarter of them held out from tuning) are synthesized in several voices — espeak-ng variants,
the packaged Piper voice and Debian's flite or festival when installed (else one more espeak-ng
variant, said in the output) — into a cache folder, and packed into conversations of a few turns:
one WAV and one WebSocket session each, a follow-up always in its lead question's conversation
and voice.  Some questions are spoken with a 600-800 ms pause mid-sentence.

For each profile (``--profiles``, passed to ``voiceagent serve --profile``) one real server
process is started on a free port and every conversation is replayed to it at real-time pace
(:func:`voiceagent.replay.replay_file`, one conversation after the other; every profile hears
the same files).  Per profile, overall, per category, per voice and held-out against tuned:

* transcript word error rate (case, punctuation and numbers normalized: "2" reads "two");
* answer accuracy: the reply contains an accepted word (numbers as digits or words), no rejected one;
* speakable replies: no list, markdown or emoji, at most two sentences unless the question asks for more;
* false cut-offs: paused questions whose answer audio began before the question was finished;
* p50 / p95 end of speech → first audio (client clock, as ``voiceagent replay``).

Writes ``quality.json``, ``quality.md`` (with every failed question, its transcript and reply,
and a guess whether STT or the LLM failed) and ``quality.png`` (accuracy against p50 latency).

    .venv/bin/python -m benchmarks.eval_quality                                   # all, about 15 min per profile
    .venv/bin/python -m benchmarks.eval_quality --profiles fast --limit 3 --voices espeak:en-us+m3 --out artifacts/quality
    .venv/bin/python -m benchmarks.eval_quality --profiles fast,fast@mulaw,fast@g722 --out docs/bench/phone_band   # a phone line's cost
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import sys
import time
import wave
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.conversations import Conversation, plan  # noqa: E402
from benchmarks.common.machine import cpu_times, machine, steal_pct  # noqa: E402
from benchmarks.common.noise import noisy  # noqa: E402
from benchmarks.common.noise import parse as parse_noise  # noqa: E402
from benchmarks.common.phone_band import through  # noqa: E402
from benchmarks.common.questions import QUESTIONS_FILE, Question, load_questions  # noqa: E402
from benchmarks.common.scoring import STT_FAIL_WER, edit_distance, judge, normalize, speakable_problems, unfinished  # noqa: E402
from benchmarks.common.serve import ServeFailed, ServeProcess  # noqa: E402
from benchmarks.common.speech import DEFAULT_VOICES, RATE, Speaker, question_speech, resolve_voices, silence  # noqa: E402

DEFAULT_PROFILES = "fast,balanced,quality"
GAP_S = 10.0
"""Silence after each question: the answer (up to two sentences, about 9 s of Piper speech) is
heard before the next question, which would otherwise barge in and cut it."""
WORDS_PER_S = 2.8
"""Piper joe's speaking rate at speed 1 (measured): estimates how long a reply plays."""


# ----------------------------------------------------------------------------- conversations


def conversation_wav(conv: Conversation, speaker: Speaker, out_dir: Path, gap_s: float) -> Path:
    """Write the conversation's audio: each question (its pause inside) then ``gap_s`` of silence."""
    from voiceagent.replay import speech_turns

    frames = silence(0.6)
    for i, q in enumerate(conv.questions):
        frames += question_speech(q, conv.voice, speaker)
        frames += silence(gap_s if i + 1 < len(conv.questions) else 1.0)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{conv.id}.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(frames)
    turns = speech_turns(np.frombuffer(frames, dtype="<i2"), RATE)
    if len(turns) != len(conv.questions):
        raise RuntimeError(f"{path}: the audio has {len(turns)} turns by its energy, expected {len(conv.questions)}")
    conv.path = path
    conv.starts_s = [start for start, _ in turns]
    return path


# ----------------------------------------------------------------------------- scoring a turn


@dataclass
class TurnRecord:
    profile: str
    conversation: str
    voice: str
    question: str
    category: str
    held_out: bool
    paused: bool
    known_failure: bool
    said: str
    transcript: str
    ref_words: int
    edits: int
    wer: float
    reply: str
    answered: bool
    correct: bool
    speakable: bool
    problems: list[str]
    unfinished: bool
    latency_ms: float | None
    cutoffs: int
    overrun: bool
    """The reply (estimated at Piper's pace) was still playing when the next question began."""
    failure: str | None
    error: str | None = None
    llm_route: str | None = None
    """``ENGINE/REASON`` of the answer, as the server's turn metrics told it (llm.route's decision)."""
    content_ms: float | None = None
    """End of speech → first audio of the answer's content: ``latency_ms`` unless the answer began
    with an acknowledgement (``llm.acknowledge_ms``), then later by as much as the server's turn
    metrics put between its first audio and its content's."""


def content_latency(result: Any) -> float | None:
    """End of speech → the first audio of the content of ``result``'s answer (see TurnRecord)."""
    if result is None or result.latency_ms is None:
        return None
    spans = getattr(result, "spans_ms", None) or {}
    if "content_audio_sent" in spans and "first_audio_sent" in spans:
        return round(float(result.latency_ms) + max(0.0, spans["content_audio_sent"] - spans["first_audio_sent"]), 1)
    return float(result.latency_ms)


def score_turn(
    profile: str, conv: Conversation, k: int, result: Any | None, error: str | None = None, lead_wer: float | None = None
) -> TurnRecord:
    """One question's record from its :class:`voiceagent.replay.TurnResult` (None: no result)."""
    q = conv.questions[k]
    transcript = result.transcript if result is not None else ""
    reply = result.reply if result is not None else ""
    ref, hyp = normalize(q.spoken), normalize(transcript)
    edits = edit_distance(ref, hyp)
    w = edits / max(1, len(ref))
    answered = bool(result is not None and result.latency_ms is not None and reply)
    correct, failure = judge(q, transcript, reply, answered, w, error, lead_wer)
    problems = speakable_problems(reply, q.sentences) if answered else []
    overrun = False
    if answered and result.first_audio_s is not None and k + 1 < len(conv.starts_s):
        overrun = result.first_audio_s + len(reply.split()) / WORDS_PER_S > conv.starts_s[k + 1]
    return TurnRecord(
        profile=profile,
        conversation=conv.id,
        voice=conv.voice.label,
        question=q.id,
        category=q.category,
        held_out=q.held_out,
        paused=len(q.parts) > 1,
        known_failure=q.known_failure,
        said=q.spoken,
        transcript=transcript,
        ref_words=len(ref),
        edits=edits,
        wer=round(w, 3),
        reply=reply,
        answered=answered,
        correct=correct,
        speakable=answered and not problems,
        llm_route=getattr(result, "llm_route", None),
        problems=problems,
        unfinished=answered and unfinished(reply),
        latency_ms=result.latency_ms if result is not None else None,
        content_ms=content_latency(result),
        cutoffs=result.cutoffs if result is not None else 0,
        overrun=overrun,
        failure=failure,
        error=error,
    )


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.array(values, dtype=np.float64), q)), 1) if values else None


def _share(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def metrics(records: list[TurnRecord]) -> dict[str, Any]:
    """Scores of a set of turns: WER over all their words, shares in %, latency in ms."""
    answered = [r for r in records if r.answered]
    lat = [r.latency_ms for r in records if r.latency_ms is not None]
    content = [r.content_ms for r in records if r.content_ms is not None]
    paused = [r for r in records if r.paused]
    return {
        "questions": len(records),
        "answered": len(answered),
        "wer_pct": _share(sum(r.edits for r in records), sum(r.ref_words for r in records)),
        "accuracy_pct": _share(sum(r.correct for r in records), len(records)),
        "speakable_pct": _share(sum(r.speakable for r in answered), len(answered)),
        "unfinished": sum(r.unfinished for r in answered),
        "false_cutoffs": {"paused_questions": len(paused), "cut_off": sum(r.cutoffs > 0 for r in paused)},
        "cutoffs_all_turns": sum(r.cutoffs for r in records),
        "overruns": sum(r.overrun for r in records),
        "latency_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95)},
        "content_latency_ms": {"p50": _pct(content, 50), "p95": _pct(content, 95)},
    }


def breakdown(records: list[TurnRecord]) -> dict[str, Any]:
    def by(key: str) -> dict[str, Any]:
        values = dict.fromkeys(getattr(r, key) for r in records)
        return {v: metrics([r for r in records if getattr(r, key) == v]) for v in values}

    return {
        "summary": metrics(records),
        "tuned": metrics([r for r in records if not r.held_out]),
        "held_out": metrics([r for r in records if r.held_out]),
        "known_failures": metrics([r for r in records if r.known_failure]),
        "by_category": by("category"),
        "by_voice": by("voice"),
    }


# ----------------------------------------------------------------------------- the server


async def replay_all(
    url: str, convs: list[Conversation], profile: str, timeout_s: float, clean: dict[Path, Path] | None = None
) -> tuple[list[TurnRecord], dict[str, Any]]:
    """Each conversation over its own connection, one after the other, at real-time pace; the
    turns' records, and the responses the server made: ``replies``, ``cut`` (cancelled by speech
    detected over them: nobody meant to interrupt, so each is a false interruption unless the
    reply overran into the next question), ``unasked`` (answers to no question: turns opened by
    noise) and how each ended (``status/reason``: count).  ``clean``: a noisy file → the
    recording it was mixed from, whose speech gives the turns."""
    from voiceagent.replay import replay_responses

    records: list[TurnRecord] = []
    counts: dict[str, Any] = {"replies": 0, "cut": 0, "unasked": 0, "ended": collections.Counter()}
    for n, conv in enumerate(convs, 1):
        assert conv.path is not None
        error = None
        results: list[Any] = []
        try:
            results, seen = await replay_responses(url, conv.path, timeout_s=timeout_s, truth=(clean or {}).get(conv.path))
            answers = {r.first_audio_s for r in results if r.first_audio_s is not None}
            counts["replies"] += len(seen)
            counts["cut"] += sum(r.status == "cancelled" and r.reason == "turn_detected" for r in seen)
            counts["ended"].update(f"{r.status}/{r.reason}" if r.reason else r.status for r in seen)
            # replay rounds both to the millisecond from the same time, so they compare exactly.
            counts["unasked"] += sum(r.first_audio_s is not None and r.first_audio_s not in answers for r in seen)
        except Exception as exc:  # one conversation's failure is reported, the run goes on
            error = f"{type(exc).__name__}: {exc}"[:300]
        if not error and len(results) != len(conv.questions):
            error = f"replay found {len(results)} turns, expected {len(conv.questions)}"
        lead_wer: float | None = None
        for k, q in enumerate(conv.questions):
            res = results[k] if not error else None
            rec = score_turn(profile, conv, k, res, error, lead_wer if q.follows else None)
            lead_wer = rec.wer
            records.append(rec)
            mark = "ok " if rec.correct else "BAD"
            print(
                f"[{profile} {n}/{len(convs)} {conv.voice.label}] {mark} {q.id}: heard {rec.transcript!r} (WER {rec.wer:.2f}) "
                f"-> {rec.reply[:70]!r} {rec.latency_ms} ms{' ' + error if error else ''}",
                flush=True,
            )
        await asyncio.sleep(0.5)  # the server closes the session before the next one opens
    return records, counts


def variant(spec: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME+SECTION.KEY=VALUE[+...]`` (a profile with settings of its own, compared
    in the same run as the profile itself) → (the profile, its own settings)."""
    name, *sets = spec.split("+")
    bad = [s for s in sets if "=" not in s or "." not in s.split("=", 1)[0]]
    if bad:
        raise ValueError(f"{spec!r}: expected NAME+SECTION.KEY=VALUE, got {bad[0]!r}")
    return name, dict(s.split("=", 1) for s in sets)


def banded(convs: list[Conversation], band: str, cache: Path) -> list[Conversation]:
    """The conversations as ``band`` carries them (:mod:`benchmarks.common.phone_band`)."""
    out = []
    for conv in convs:
        assert conv.path is not None
        path = through(band, conv.path, cache / band / conv.path.name)
        out.append(dataclasses.replace(conv, path=path))
    return out


def noised(convs: list[Conversation], spec: str, cache: Path) -> tuple[list[Conversation], dict[Path, Path]]:
    """The conversations with ``spec``'s noise mixed in (:mod:`benchmarks.common.noise`), and
    each noisy file → its clean one."""
    out, clean = [], {}
    for conv in convs:
        assert conv.path is not None
        path = noisy(spec, conv.path, cache / spec / conv.path.name, cache)
        clean[path] = conv.path
        out.append(dataclasses.replace(conv, path=path))
    return out, clean


def run_profile(spec: str, overrides: dict[str, str], convs: list[Conversation], timeout_s: float, cache: Path) -> dict[str, Any]:
    from voiceagent.config import load_config

    entry: dict[str, Any] = {}
    spec_only, _, band = spec.partition("@")
    band, _, own_sets = band.partition("+")  # PROFILE@BAND+KEY=VALUE: the settings belong to the profile
    if own_sets:
        spec_only = f"{spec_only}+{own_sets}"
    clean: dict[Path, Path] = {}
    if parse_noise(band):  # PROFILE@NOISE: the same questions with a noise bed mixed in
        entry["noise"] = band
        convs, clean = noised(convs, band, cache)
    elif band:  # PROFILE@BAND: the same questions heard through a phone codec
        entry["band"] = band
        convs = banded(convs, band, cache)
    profile, own = variant(spec_only)
    overrides = {**overrides, **own}
    try:
        cfg = load_config(env={}, overrides={**({"profile": profile} if profile != "default" else {}), **overrides})
        entry["models"] = {"stt": cfg.stt.model, "llm": cfg.llm.model, "tts": cfg.tts.model, "turn": cfg.turn.model}
        t0 = time.monotonic()
        server = ServeProcess(overrides, ("--profile", profile) if profile != "default" else (), log_lines=15)
    except (Exception, ServeFailed) as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
        print(f"profile {profile}: {entry['error']}", flush=True)
        return entry
    entry["startup"] = {
        "process_to_ready_s": round(time.monotonic() - t0, 1),
        "turn_cost": server.ready.get("turn_cost"),
    }
    ran = server.ready.get("profile", "")
    if profile == "default" and ran not in ("", "auto"):  # profile auto chose one at start-up: its models ran
        entry["auto_chose"] = ran
        cfg = load_config(env={}, overrides={"profile": ran, **overrides})
        entry["models"] = {"stt": cfg.stt.model, "llm": cfg.llm.model, "tts": cfg.tts.model, "turn": cfg.turn.model}
    times0 = cpu_times()
    t1 = time.monotonic()
    try:
        records, entry["responses"] = asyncio.run(replay_all(server.url, convs, spec, timeout_s, clean))
    finally:
        server.stop(30)
    times1 = cpu_times()
    entry["wall_s"] = round(time.monotonic() - t1, 1)
    entry["cpu_steal_pct"] = steal_pct(times0, times1)
    entry |= scores(records)
    return entry


# ----------------------------------------------------------------------------- report


def scores(records: list[TurnRecord]) -> dict[str, Any]:
    """A profile's scores, its failed questions and every turn, from its records."""
    routes = collections.Counter(r.llm_route for r in records if r.llm_route)
    # Per answering engine and reason (llm.route's decision): how many, and how many right.
    by_route = {
        route: {"turns": n, "correct": sum(1 for r in records if r.llm_route == route and r.correct)} for route, n in sorted(routes.items())
    }
    return breakdown(records) | {
        "routes": by_route,
        "failures": [
            {k: getattr(r, k) for k in ("question", "voice", "category", "said", "transcript", "wer", "reply", "failure", "error")}
            for r in records
            if not r.correct
        ],
        "turns": [asdict(r) for r in records],
    }


def rescore(report: dict[str, Any], questions: list[Question]) -> dict[str, Any]:
    """Score a finished run again with today's scoring and question file (same transcripts and
    replies, no server): what changes is only which replies count as right."""
    by_id = {q.id: q for q in questions}
    for entry in report["profiles"].values():
        if "turns" not in entry:
            continue
        records: list[TurnRecord] = []
        lead_wer: float | None = None
        for turn in entry["turns"]:
            rec = TurnRecord(**turn)
            q = by_id[rec.question]
            rec.correct, rec.failure = judge(
                q, rec.transcript, rec.reply, rec.answered, rec.wer, rec.error, lead_wer if q.follows else None
            )
            lead_wer = rec.wer
            records.append(rec)
        entry |= scores(records)
    report["rescored"] = True
    return report


def _cell(v: Any, suffix: str = "") -> str:
    return "–" if v is None else f"{v}{suffix}"


def markdown(report: dict[str, Any]) -> str:
    profiles = {p: e for p, e in report["profiles"].items() if "summary" in e}
    lines = [
        "# Spoken quality evaluation",
        "",
        f"Machine: {report['machine']}.  Command: `{report['command']}`",
        "",
        f"{report['questions']} questions ({report['held_out']} held out, {report['paused']} with a mid-sentence pause, "
        f"{report['known_failures']} known failures of issue #12) in {len(report['conversations'])} conversations; "
        f"voices {', '.join(report['voices'])}; {report['gap_s']} s of silence after each question; seed {report['seed']}.",
        *[f"* {note}" for note in report["voice_notes"]],
        *[f"* profile {p}: {e['error']}" for p, e in report["profiles"].items() if "error" in e],
        *(
            ["* rescored (`--rescore`): the run's transcripts and replies, scored with a later answer key"]
            if report.get("rescored")
            else []
        ),
        "",
        "| profile | STT | LLM | answered | WER % | accuracy % | tuned % | held-out % | known failures % "
        "| speakable % | false cut-offs | p50 ms | p95 ms | content p50 ms | content p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, e in profiles.items():
        s = e["summary"]
        fc = s["false_cutoffs"]
        label = f"{p} (auto: {e['auto_chose']})" if "auto_chose" in e else p
        lines.append(
            f"| {label} | {e['models']['stt']} | {e['models']['llm']} | {s['answered']}/{s['questions']} | {_cell(s['wer_pct'])} "
            f"| {_cell(s['accuracy_pct'])} | {_cell(e['tuned']['accuracy_pct'])} | {_cell(e['held_out']['accuracy_pct'])} "
            f"| {_cell(e['known_failures']['accuracy_pct'])} | {_cell(s['speakable_pct'])} | {fc['cut_off']}/{fc['paused_questions']} "
            f"| {_cell(s['latency_ms']['p50'])} | {_cell(s['latency_ms']['p95'])} "
            f"| {_cell(s.get('content_latency_ms', {}).get('p50'))} | {_cell(s.get('content_latency_ms', {}).get('p95'))} |"
        )
    lines += [
        "",
        "WER over all words of the transcripts (case, punctuation and numbers normalized).  Accuracy: the reply contains an "
        "accepted answer (unanswered questions count as wrong).  Speakable: of the answered, no list, markdown or emoji and at most "
        "two sentences unless asked for more.  False cut-offs: paused questions whose answer began before the question ended.  "
        "Latency: end of speech → first audio byte at the client; content: → the first audio of the answer itself "
        "(later only when an acknowledgement came first).  Held-out questions are not to be used when tuning "
        "prompts or settings: a tuned gain that does not show on them is overfitting.",
    ]
    for title, key in (("category", "by_category"), ("voice", "by_voice")):
        names = list(dict.fromkeys(n for e in profiles.values() for n in e[key]))
        lines += [
            "",
            f"Accuracy % (WER %) by {title}:",
            "",
            f"| {title} | " + " | ".join(profiles) + " |",
            "|---|" + "---|" * len(profiles),
        ]
        for n in names:
            cells = [
                f"{_cell(e[key][n]['accuracy_pct'])} ({_cell(e[key][n]['wer_pct'])}) of {e[key][n]['questions']}" if n in e[key] else "–"
                for e in profiles.values()
            ]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    for p, e in profiles.items():
        s = e["summary"]
        lines += [
            "",
            f"## {p}: {len(e['failures'])} failed questions",
            "",
            f"Server ready in {e['startup']['process_to_ready_s']} s; replay {e['wall_s']} s; CPU steal {e['cpu_steal_pct']} %; "
            f"{s['unfinished']} replies stopped mid-sentence; {s['overruns']} replies estimated still playing at the next question.",
            "",
            "Answered by (engine/reason: right of turns): "
            + ("; ".join(f"`{r}` {v['correct']}/{v['turns']}" for r, v in e.get("routes", {}).items()) or "not told"),
            "",
            f"Guess: `stt` when the transcript's WER is above {STT_FAIL_WER}, else `llm`.",
            "",
            "| question | voice | said | transcript | WER | reply | guess |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in e["failures"]:
            reply = (f["reply"] or f["error"] or "").replace("|", "/").replace("\n", " ")
            heard = f["transcript"].replace("|", "/")
            lines.append(f"| {f['question']} | {f['voice']} | {f['said']} | {heard} | {f['wer']} | {reply} | {f['failure']} |")
    return "\n".join(lines) + "\n"


def _short(profile: str) -> str:
    """A profile's name for the picture: a variant (``quality+stt.beam_size=1``) as ``quality'``,
    its settings left to the legend, so that long ones cannot push the plot off its canvas."""
    base, _, settings = profile.partition("+")
    return base + ("'" * (1 + settings.count("+")) if settings else "")


def plot(report: dict[str, Any], path: Path) -> None:
    """Accuracy (held-out questions hollow) against p50 latency with a line to p95, one colour a
    profile, into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.2))
    for p, e in report["profiles"].items():
        if "summary" not in e or e["summary"]["latency_ms"]["p50"] is None:
            continue
        s, lat = e["summary"], e["summary"]["latency_ms"]
        label = f"{_short(p)}: {e['models']['stt']}, {e['models']['llm']}" + (f"\n  {p.partition('+')[2]}" if "+" in p else "")
        (dot,) = ax.plot(lat["p50"], s["accuracy_pct"], "o", markersize=9, label=label)
        if lat["p95"] is not None:
            ax.plot([lat["p50"], lat["p95"]], [s["accuracy_pct"]] * 2, "-", color=dot.get_color(), alpha=0.4, lw=2)
        if e["held_out"]["accuracy_pct"] is not None:
            ax.plot(lat["p50"], e["held_out"]["accuracy_pct"], "o", mfc="none", color=dot.get_color(), markersize=9)
        ax.annotate(_short(p), (lat["p50"], s["accuracy_pct"]), textcoords="offset points", xytext=(6, -12))
    ax.set_xlabel("end of speech → first audio, p50 ms (line to p95)")
    ax.set_ylabel("right answers % (hollow: held-out questions)")
    ax.set_ylim(0, 105)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    ax.set_title("Spoken quality against latency, per profile")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--profiles",
        default=DEFAULT_PROFILES,
        help="comma-separated; 'default': serve without --profile; NAME+SECTION.KEY=VALUE: the profile with that setting; "
        "NAME@BAND: the questions through a phone codec (mulaw: 8 kHz G.711, g722: 16 kHz G.722; wide: as recorded); "
        "NAME@NOISE: with a noise bed mixed in (babble, music or street, then the SNR in dB: babble5; benchmarks/common/noise.py)",
    )
    ap.add_argument("--voices", default=",".join(DEFAULT_VOICES), help="comma-separated ENGINE:NAME (espeak, piper, flite, festival)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"), help="folder for quality.json, quality.md, quality.png")
    ap.add_argument("--seed", type=int, default=12, help="how questions are packed into conversations and voices assigned")
    ap.add_argument("--questions", default=str(QUESTIONS_FILE))
    ap.add_argument("--gap", type=float, default=GAP_S, help="seconds of silence after each question")
    ap.add_argument("--every-voice", action="store_true", help="speak every conversation in every voice (n voices: n times as long)")
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "eval_quality"), help="synthesized speech (not committed)")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds to wait for the last answer after a conversation's audio")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="passed to every server")
    ap.add_argument("--rescore", metavar="JSON", help="score a finished run's quality.json again (no server) and rewrite its reports")
    args = ap.parse_args(argv)

    questions = load_questions(Path(args.questions))
    if args.rescore:
        path = Path(args.rescore)
        report = rescore(json.loads(path.read_text()), questions)
        path.write_text(json.dumps(report, indent=1) + "\n")
        path.with_suffix(".md").write_text(markdown(report))
        plot(report, path.with_suffix(".png"))
        print(markdown(report))
        return 0
    if args.limit:
        questions = questions[: args.limit]
    voices, notes = resolve_voices([v.strip() for v in args.voices.split(",") if v.strip()])
    for note in notes:
        print(f"note: {note}", flush=True)
    convs = plan(questions, voices, args.seed, every_voice=args.every_voice)
    speaker = Speaker(Path(args.cache))
    audio_s = 0.0
    for conv in convs:
        path = conversation_wav(conv, speaker, Path(args.cache) / "conversations", args.gap)
        with wave.open(str(path), "rb") as w:
            audio_s += w.getnframes() / RATE
    per_profile = audio_s + len(convs) * 9.0  # each: its replay's tail, the last answer played, a pause
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    print(
        f"{len(questions)} questions in {len(convs)} conversations, {audio_s / 60:.1f} min of audio: "
        f"about {per_profile / 60:.0f} min per profile plus its start-up, {len(profiles)} profile(s)",
        flush=True,
    )
    overrides = {"server.max_sessions": "4", **dict(s.split("=", 1) for s in args.set)}
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.eval_quality", *(sys.argv[1:] if argv is None else argv)]),
        "seed": args.seed,
        "gap_s": args.gap,
        "overrides": overrides,
        "voices": [v.label for v in voices],
        "voice_notes": notes,
        "questions": len(questions),
        "held_out": sum(q.held_out for q in questions),
        "paused": sum(len(q.parts) > 1 for q in questions),
        "known_failures": sum(q.known_failure for q in questions),
        "conversations": [{"id": c.id, "voice": c.voice.label, "questions": [q.id for q in c.questions]} for c in convs],
        "profiles": {},
    }
    t0 = time.monotonic()
    for profile in profiles:
        report["profiles"][profile] = run_profile(profile, overrides, convs, args.timeout, Path(args.cache) / "bands")
    report["wall_s"] = round(time.monotonic() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "quality.md").write_text(markdown(report))
    plot(report, out / "quality.png")
    print(markdown(report))
    print(f"wrote {out}/quality.json, quality.md, quality.png in {report['wall_s']} s")
    return 0 if all("summary" in e for e in report["profiles"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
