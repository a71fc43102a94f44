#!/usr/bin/env python3
"""Answer accuracy of the LLM alone, per system prompt: the spoken eval's questions as text.

``benchmarks/eval_quality.py`` measures the whole chain aloud (about 13 minutes per profile).  To
choose the system prompt and the reply-style examples (issue #12) this script asks the same
questions of the same packaged model, with the same prompt layout as a session (system message,
the conversation so far, the user's words; greedy decoding, ``llm.max_tokens``), in the same
conversations as the spoken eval (``benchmarks.common.conversations.plan`` with its seed), and scores
the replies with the same judge (``benchmarks.common.scoring.judge``).  No audio: a few minutes per
prompt and model.

Two inputs:

* ``--input text``: what the questions say (the LLM's part of the failures, on clean input);
* ``--input heard``: what the STT of a spoken run heard, from its ``quality.json``
  (``--heard FILE:PROFILE``), so that a prompt can be judged on the transcripts it will really get,
  errors included.  A reply is judged as in that run (an echo of what was heard is wrong).

Prompts are the ``llm.instructions`` and ``llm.examples`` of the config (``--set`` changes them, as
for the server), or one of the named ``--variants`` below (the ones tried for issue #12).

    .venv/bin/python -m benchmarks.eval_answers --model qwen2.5-0.5b --variants config,ex3 --out artifacts/answers
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.conversations import Conversation, plan  # noqa: E402
from benchmarks.common.questions import QUESTIONS_FILE, Question, load_questions  # noqa: E402
from benchmarks.common.scoring import judge, speakable_problems  # noqa: E402
from benchmarks.common.speech import DEFAULT_VOICES, resolve_voices  # noqa: E402
from voiceagent.backends.llama_cpp import LlamaCppContext, gguf_path  # noqa: E402
from voiceagent.backends.protocols import example_messages  # noqa: E402
from voiceagent.config import DEFAULT_EXAMPLES, DEFAULT_INSTRUCTIONS, load_config, parse_examples  # noqa: E402
from voiceagent.tools.spec import Message  # noqa: E402

_NOISY = " The user's words come from speech recognition and may be misheard: answer what they most likely meant."
# Issue #48: names the mechanism (a recogniser mishears a word for one that sounds alike) and
# forbids the two ways a small model goes wrong with it: repeating the misheard words back, or
# talking about the mistake instead of answering.
_HEARD = (
    " The user's words are written by a speech recogniser, which sometimes mishears a word as one that sounds alike."
    " When a word does not fit, answer the question the user most likely asked, without mentioning the mistake."
)


@dataclass(frozen=True)
class Variant:
    name: str
    instructions: str
    examples: tuple[tuple[str, str], ...]


_EX1 = (
    ("My name is Alex.", "Nice to meet you, Alex!"),
    ("How many hours are in a day?", "There are 24 hours in a day."),
    ("Remind me to feed the dog at noon.", "Okay, I will remind you to feed the dog at noon."),
)
_EX2 = (
    ("Hi, I'm Alex.", "Hi Alex, nice to meet you!"),
    ("What is the capital of Spain?", "The capital of Spain is Madrid."),
    ("And how big is it?", "Madrid has about 3.3 million people."),
    ("What is nine plus five?", "Nine plus five is 14."),
    ("Remind me to feed the dog at noon.", "Okay, I will remind you to feed the dog at noon."),
)
_EX3 = parse_examples(DEFAULT_EXAMPLES)  # the measured set in voiceagent/config.py (off by default)
_EX4 = (("How many minutes are in an hour?", "There are 60 minutes in an hour."),)
_DIRECT = (
    "You are a friendly voice assistant in a spoken conversation. "
    "Answer the question directly and correctly in one or two short, complete sentences of plain spoken English. "
    "Never use lists, markdown, code or emojis."
)


def variants(config_instructions: str, config_examples: tuple[tuple[str, str], ...]) -> dict[str, Variant]:
    """The prompts compared for issue #12 (``config``: what the config says now).  ``ex1``..``ex4``
    are example sets (``ex3`` is ``DEFAULT_EXAMPLES``), ``noisy`` adds a line on misheard words,
    ``direct`` asks for the fact first."""
    plain = DEFAULT_INSTRUCTIONS
    return {
        "config": Variant("config", config_instructions, config_examples),
        "plain": Variant("plain", plain, ()),
        "plain+noisy": Variant("plain+noisy", plain + _NOISY, ()),
        "plain+heard": Variant("plain+heard", plain + _HEARD, ()),
        "ex1": Variant("ex1", plain, _EX1),
        "ex2": Variant("ex2", plain, _EX2),
        "ex2+noisy": Variant("ex2+noisy", plain + _NOISY, _EX2),
        "ex3": Variant("ex3", plain, _EX3),
        "ex4": Variant("ex4", plain, _EX4),
        "direct": Variant("direct", _DIRECT, ()),
        "direct+ex3": Variant("direct+ex3", _DIRECT, _EX3),
    }


def heard_transcripts(spec: str) -> dict[tuple[str, str], str]:
    """(conversation, question id) -> transcript, from ``FILE:PROFILE`` of a spoken run."""
    path, _, profile = spec.rpartition(":")
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    return {(t["conversation"], t["question"]): t["transcript"] for t in report["profiles"][profile]["turns"]}


def run_variant(
    context: LlamaCppContext,
    variant: Variant,
    convs: list[Conversation],
    heard: dict[tuple[str, str], str] | None,
    max_tokens: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for conv in convs:
        history: list[Message] = []
        for q in conv.questions:
            said = q.spoken if heard is None else heard.get((conv.id, q.id), "")
            reply = ""
            t0 = time.perf_counter()
            if said:
                messages = [Message("system", variant.instructions), *example_messages(variant.examples), *history, Message("user", said)]
                reply = "".join(p for p in context.stream(messages, max_tokens, 0.0) if isinstance(p, str)).strip()
                history += [Message("user", said), *([Message("assistant", reply)] if reply else [])]
            correct, _ = judge(q, said, reply, bool(reply), 0.0, None, None)
            rows.append(
                {
                    "conversation": conv.id,
                    "question": q.id,
                    "category": q.category,
                    "held_out": q.held_out,
                    "input": said,
                    "reply": reply,
                    "correct": correct,
                    "speakable": bool(reply) and not speakable_problems(reply, q.sentences),
                    "s": round(time.perf_counter() - t0, 2),
                }
            )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def acc(rs: list[dict[str, Any]]) -> float | None:
        return round(100 * sum(r["correct"] for r in rs) / len(rs), 1) if rs else None

    return {
        "n": len(rows),
        "accuracy_pct": acc(rows),
        "tuned_pct": acc([r for r in rows if not r["held_out"]]),
        "held_out_pct": acc([r for r in rows if r["held_out"]]),
        "speakable_pct": round(100 * sum(r["speakable"] for r in rows) / len(rows), 1) if rows else None,
        "mean_s": round(sum(r["s"] for r in rows) / len(rows), 2) if rows else None,
    }


def rescore(report: dict[str, Any], questions: list[Question]) -> dict[str, Any]:
    """Judge a finished run's replies again with today's answer key (no model): the same replies,
    only which count as right may change."""
    by_id = {q.id: q for q in questions}
    for entry in report["variants"].values():
        for row in entry["rows"]:
            row["correct"], _ = judge(by_id[row["question"]], row["input"], row["reply"], bool(row["reply"]), 0.0, None, None)
        entry["summary"] = summary(entry["rows"])
    report["rescored"] = True
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--model", default="", help="catalog LLM (default: the config's llm.model)")
    ap.add_argument("--variants", default="config", help="comma-separated: " + ", ".join(variants("", ())))
    ap.add_argument("--input", choices=("text", "heard"), default="text")
    ap.add_argument("--heard", default=str(ROOT / "docs" / "bench" / "quality.json") + ":fast", help="FILE:PROFILE of a spoken run")
    ap.add_argument("--questions", default=str(QUESTIONS_FILE))
    ap.add_argument("--seed", type=int, default=12, help="as the spoken run's --seed (the same conversations)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--out", default="", help="folder for answers.json (default: print only)")
    ap.add_argument("--rescore", metavar="JSON", help="judge a finished run's answers.json again (no model) and rewrite it")
    args = ap.parse_args()

    if args.rescore:
        path = Path(args.rescore)
        report = rescore(json.loads(path.read_text(encoding="utf-8")), load_questions(Path(args.questions)))
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        for name, entry in report["variants"].items():
            print(name, json.dumps(entry["summary"]))
        return 0

    cfg = load_config(env={}, overrides=dict(s.split("=", 1) for s in args.set))
    model = args.model or cfg.llm.model
    questions = load_questions(Path(args.questions))
    voices, _ = resolve_voices(list(DEFAULT_VOICES))
    convs = plan(questions, voices, args.seed)
    heard = heard_transcripts(args.heard) if args.input == "heard" else None
    context = LlamaCppContext(gguf_path(model, cfg.cache_path, cfg.llm.quant), cfg.llm.threads, cfg.llm.context)
    table = variants(cfg.llm.instructions, cfg.llm.example_pairs)
    report: dict[str, Any] = {"model": model, "input": args.input, "heard": args.heard if heard else None, "variants": {}}
    for name in args.variants.split(","):
        rows = run_variant(context, table[name], convs, heard, cfg.llm.max_tokens)
        report["variants"][name] = {"summary": summary(rows), "rows": rows}
        print(name, json.dumps(report["variants"][name]["summary"]), flush=True)
    context.close()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "answers.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
