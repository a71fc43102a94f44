#!/usr/bin/env python3
"""Does the user's sentence end here?  Two judges compared on the spoken eval's questions.

The spoken eval's false cut-offs (``benchmarks/eval_quality.py``: 4–5 of its 9 questions with a
600–800 ms pause mid-sentence) come from the turn stage confirming the first half.  This measures
what could tell the halves from whole questions:

* **the turn model** (smart-turn v3, audio): its completion probability on each question cut as
  the server cuts it (``benchmarks.common.stt.VadCutter``, all voices), whole, and on the first
  segment of a question the VAD split at its pause;
* **the LLM** (text): the probability that the next token after the user's words, without their
  final punctuation, ends the sentence (a token starting with ``.``, ``?`` or ``!``, or the end
  of the message), in the chat prompt the session builds (the default instructions, then the
  user's words).  Whole questions against the same questions with their last one or two words
  dropped, and against the first halves of the paused ones.

The LLM also judges what Whisper heard (``--heard``, default tiny as ``fast`` runs it): each
question cut by the real VAD, whole as the rejoin transcribes it, and a paused question's first
segment alone, as the turn stage would judge them.

For each judge: the AUC (the chance that a whole question scores higher than an unfinished one)
and, per threshold, the share of whole questions it would wrongly hold (below the threshold) and
of unfinished ones it would rightly hold.

    .venv/bin/python -m benchmarks.eval_end_of_turn --out docs/bench

Writes ``end_of_turn.json`` and ``end_of_turn.md``.  About 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.questions import Question, load_questions  # noqa: E402
from benchmarks.common.speech import DEFAULT_VOICES, RATE, Speaker, Voice, resolve_voices  # noqa: E402
from benchmarks.common.stt import VadCutter, clips, load_backend, parse_config, rejoined_text  # noqa: E402
from voiceagent.backends.protocols import Message  # noqa: E402
from voiceagent.text.clauses import unpunctuated as bare  # noqa: E402  (what the product judges: the words alone)

TEXT_THRESHOLDS = (0.001, 0.003, 0.01, 0.03)
AUDIO_THRESHOLDS = (0.1, 0.3, 0.5)


def texts(questions: Sequence[Question]) -> list[tuple[str, str, str]]:
    """(kind, question id, text): each question whole ("complete"), with its last one and two
    words dropped where at least two remain ("truncated"), and a paused one's first half
    ("half"); all without final punctuation."""
    out: list[tuple[str, str, str]] = []
    for q in questions:
        words = bare(q.spoken).split()
        out.append(("complete", q.id, " ".join(words)))
        for k in (1, 2):
            if len(words) - k >= 2:
                out.append(("truncated", q.id, " ".join(words[:-k])))
        if q.pause_ms:
            out.append(("half", q.id, bare(q.text.split("|")[0])))
    return out


def auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """P(a positive scores above a negative), ties half."""
    if not positive or not negative:
        return None
    p, n = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(np.mean((p > n) + 0.5 * (p == n)))


def judged(complete: Sequence[float], unfinished: dict[str, Sequence[float]], thresholds: Sequence[float]) -> dict[str, Any]:
    """AUC and, per threshold, the share held (scored below it) of whole and unfinished utterances."""
    return {
        "n_complete": len(complete),
        "auc": {k: auc(complete, v) for k, v in unfinished.items()},
        "held": [
            {
                "threshold": t,
                "complete": round(float(np.mean(np.asarray(complete) < t)), 3),
                **{k: round(float(np.mean(np.asarray(v) < t)), 3) if len(v) else None for k, v in unfinished.items()},
            }
            for t in thresholds
        ],
    }


class TextJudge:
    """P(the sentence ends after the user's words) from a catalog LLM, as the session prompts it:
    the product's own reading (:meth:`LlamaCppContext.end_probability`, ``turn.text_threshold``)."""

    def __init__(self, name: str) -> None:
        from voiceagent.backends.llama_cpp import LlamaCppContext, gguf_path
        from voiceagent.config import DEFAULT_INSTRUCTIONS, load_config

        cfg = load_config(env={})
        self._context = LlamaCppContext(gguf_path(name, cfg.cache_path), cfg.llm.threads, 1024)
        self._system = Message("system", DEFAULT_INSTRUCTIONS)

    def end_probability(self, text: str) -> float:
        p = self._context.end_probability([self._system, Message("user", text)])
        if p is None:
            raise RuntimeError(f"{text!r}: the prompt could not be rendered")
        return p


def cut_questions(questions: list[Question], voices: list[Voice], cache: Path) -> list[tuple[Question, list[Any]]]:
    """Each question in each voice with its segments, cut by the real VAD as the server cuts them
    (:class:`benchmarks.common.stt.VadCutter`); questions the VAD found no speech in are left out."""
    cutter = VadCutter()
    out = [(q, cutter.cuts(speech)) for _conv, _voice, q, speech in clips(questions, voices, Speaker(cache), 0, pad=False)]
    return [(q, cuts) for q, cuts in out if cuts]


def heard_texts(cut: list[tuple[Question, list[Any]]], stt: str) -> list[tuple[str, str, str]]:
    """(kind, question id, text) as Whisper (``stt``, ``MODEL@BEAM``) hears the questions ``cut``:
    "complete" the whole question as the rejoin transcribes it, "half" the first segment of a
    paused question the VAD split, alone; without final punctuation."""
    backend = load_backend(parse_config(stt))
    out: list[tuple[str, str, str]] = []
    for q, cuts in cut:
        text, alone = rejoined_text(cuts, lambda a: backend.transcribe(a, "en"))
        if bare(text):
            out.append(("complete", q.id, bare(text)))
        if q.pause_ms and len(cuts) > 1 and bare(alone[0]):
            out.append(("half", q.id, bare(alone[0])))
    return out


def text_judge(judge: TextJudge, items: list[tuple[str, str, str]]) -> dict[str, Any]:
    scored = [(kind, text, judge.end_probability(text)) for kind, _qid, text in items]
    by_kind = {k: [p for kind, _t, p in scored if kind == k] for k in ("complete", "truncated", "half")}
    unfinished = {k: by_kind[k] for k in ("truncated", "half") if by_kind[k]}
    r = judged(by_kind["complete"], unfinished, TEXT_THRESHOLDS)
    r["lowest_complete"] = sorted((round(p, 5), t) for kind, t, p in scored if kind == "complete")[:5]
    r["scores"] = [{"kind": k, "text": t, "p_end": round(p, 6)} for k, t, p in scored]
    return r


def audio_scores(cut: list[tuple[Question, list[Any]]]) -> dict[str, list[float]]:
    """smart-turn's completion probability on the questions ``cut``, whole, and on the first
    segment of a paused question the VAD split."""
    from voiceagent.backends.smart_turn import SmartTurn

    turn = SmartTurn()
    out: dict[str, list[float]] = {"complete": [], "half": []}
    for q, cuts in cut:
        out["complete"].append(turn.completion_probability(np.concatenate([c[2] for c in cuts])[-8 * RATE :]))
        if q.pause_ms and len(cuts) > 1:
            out["half"].append(turn.completion_probability(cuts[0][2][-8 * RATE :]))
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Does the sentence end here? The turn model (audio) against the LLM (text)",
        "",
        f"Machine: {report['machine']}.  Command: `{report['command']}`",
        "",
        "Held: the share scored below the threshold, that a rule 'wait for more below it' would hold. "
        "Whole questions held are answers delayed; halves and truncations held are cut-offs avoided.",
        "",
    ]
    for name, r in report["judges"].items():
        aucs = ", ".join(f"{k} {v:.3f}" for k, v in r["auc"].items() if v is not None)
        lines += [f"## {name}", "", f"{r['n_complete']} whole questions; AUC whole vs {aucs}.", ""]
        kinds = [k for k in r["held"][0] if k != "threshold"]
        lines += ["| threshold | " + " | ".join(f"{k} held" for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
        for row in r["held"]:
            lines.append(f"| {row['threshold']} | " + " | ".join("–" if row[k] is None else f"{100 * row[k]:.0f} %" for k in kinds) + " |")
        if "lowest_complete" in r:
            lines += ["", "Whole questions it scores lowest: " + "; ".join(f"{t} ({p:.4f})" for p, t in r["lowest_complete"]) + "."]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b", help="catalog LLMs to judge the text")
    ap.add_argument("--heard", default="whisper-tiny@1", help="MODEL@BEAM whose transcripts the LLM also judges ('' for none)")
    ap.add_argument("--voices", default=",".join(DEFAULT_VOICES))
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "eval_quality"), help="synthesized speech, shared with eval_quality.py")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = ap.parse_args()

    questions = load_questions()
    voices, _notes = resolve_voices([v.strip() for v in args.voices.split(",") if v.strip()])
    items = texts(questions)
    cut = cut_questions(questions, voices, Path(args.cache))
    heard = heard_texts(cut, args.heard) if args.heard else []
    judges: dict[str, Any] = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        judge = TextJudge(name)
        judges[f"LLM {name}, text"] = r = text_judge(judge, items)
        print(f"{name}: AUC {r['auc']}", flush=True)
        if heard:
            judges[f"LLM {name}, what {args.heard} heard"] = r = text_judge(judge, heard)
            print(f"{name} on {args.heard}: AUC {r['auc']}", flush=True)
    audio = audio_scores(cut)
    judges["smart-turn v3, audio"] = judged(audio["complete"], {"half": audio["half"]}, AUDIO_THRESHOLDS)
    print(f"smart-turn: AUC {judges['smart-turn v3, audio']['auc']}", flush=True)
    report = {"machine": machine(), "command": " ".join(["python -m benchmarks.eval_end_of_turn", *sys.argv[1:]]), "judges": judges}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "end_of_turn.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "end_of_turn.md").write_text(markdown(report))
    print(f"wrote {out}/end_of_turn.json, end_of_turn.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
