#!/usr/bin/env python3
"""Would the large model's answers survive an opening written by the small one?  Answer accuracy
of three ways to write a reply, on what the STT of a spoken run heard (issue #48):

* ``small``: the 0.5B alone;
* ``large``: the 1.5B alone;
* ``opening``: the 0.5B writes the reply's first clause (cut as the server cuts it,
  ``llm.first_clause_words``), and the 1.5B goes on from those words as its own.

The first audio of a reply waits only for its first clause, so if ``opening`` is as accurate as
``large`` the accurate model's answers could be spoken at about the small model's time to first
audio; the 1.5B's part is made while the first clause plays.  Only the text is judged here (the
same conversations, prompt layout and judge as ``scripts/eval_answers.py``); each way keeps its
own conversation history.  Greedy decoding, the config's ``llm.max_tokens`` in all.

    .venv/bin/python scripts/eval_opening.py --heard docs/bench/models_amd/quality.json:default --out docs/bench/opening
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent

from scripts.bench.conversations import plan  # noqa: E402
from scripts.bench.machine import machine  # noqa: E402
from scripts.bench.questions import QUESTIONS_FILE, load_questions  # noqa: E402
from scripts.bench.scoring import judge  # noqa: E402
from scripts.bench.speech import DEFAULT_VOICES, resolve_voices  # noqa: E402
from scripts.eval_answers import heard_transcripts, summary  # noqa: E402
from voiceagent.backends.llama_cpp import LlamaCppContext, gguf_path  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.text.clauses import ClauseSplitter  # noqa: E402
from voiceagent.tools.spec import Message  # noqa: E402

WAYS = ("small", "large", "opening")


def first_clause(context: LlamaCppContext, messages: list[Message], max_tokens: int, words: int) -> tuple[str, bool]:
    """The small model's reply up to the end of its first clause, and whether the reply ended
    there (a reply of one clause is all the small model's)."""
    splitter = ClauseSplitter(first_max_words=words)
    stream = context.stream(messages, max_tokens, 0.0)
    try:
        for piece in stream:
            if not isinstance(piece, str):
                continue
            clauses = splitter.push(piece)
            if clauses:
                return clauses[0], False
    finally:
        cast(Any, stream).close()
    return "".join(splitter.flush()), True


def continue_from(context: LlamaCppContext, messages: list[Message], opening: str, max_tokens: int) -> str:
    """The large model's reply after ``opening``, taken as the start of its own turn."""
    llm = cast(Any, context)._llm
    prompt = cast(Any, context)._prompt_tokens(messages, ()) + llm.tokenize(opening.encode(), add_bos=False, special=False)
    out = llm.create_completion(prompt=prompt, max_tokens=max_tokens, temperature=0.0, top_k=1, seed=0)
    return str(out["choices"][0]["text"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--heard", required=True, help="FILE:PROFILE of a spoken run (scripts/eval_quality.py)")
    ap.add_argument("--small", default="qwen2.5-0.5b")
    ap.add_argument("--small-quant", default="iq4_nl")
    ap.add_argument("--large", default="qwen2.5-1.5b")
    ap.add_argument("--large-quant", default="shipped")
    ap.add_argument("--questions", default=str(QUESTIONS_FILE))
    ap.add_argument("--seed", type=int, default=12, help="as the spoken run's --seed (the same conversations)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    cfg = load_config(env={}, overrides={})
    words, max_tokens = cfg.llm.first_clause_words, cfg.llm.max_tokens
    questions = load_questions(Path(args.questions))
    voices, _ = resolve_voices(list(DEFAULT_VOICES))
    convs = plan(questions, voices, args.seed)
    heard = heard_transcripts(args.heard)
    small = LlamaCppContext(gguf_path(args.small, cfg.cache_path, args.small_quant), cfg.llm.threads, cfg.llm.context)
    large = LlamaCppContext(gguf_path(args.large, cfg.cache_path, args.large_quant), cfg.llm.threads, cfg.llm.context)
    system = Message("system", cfg.llm.instructions)
    report: dict[str, Any] = {
        "machine": machine(),
        "heard": args.heard,
        "small": args.small,
        "large": args.large,
        "first_clause_words": words,
        "ways": {},
    }
    for way in WAYS:
        rows: list[dict[str, Any]] = []
        for conv in convs:
            history: list[Message] = []
            for q in conv.questions:
                said = heard.get((conv.id, q.id), "")
                reply, opening = "", ""
                t0 = time.perf_counter()
                if said:
                    messages = [system, *history, Message("user", said)]
                    if way == "large":
                        reply = "".join(p for p in large.stream(messages, max_tokens, 0.0) if isinstance(p, str))
                    else:
                        opening, whole = first_clause(small, messages, max_tokens, words)
                        reply = opening
                        if not whole:
                            rest = "".join(p for p in small.stream(messages, max_tokens, 0.0) if isinstance(p, str))
                            reply = rest if way == "small" else opening + continue_from(large, messages, opening, max_tokens)
                    reply = reply.strip()
                    history += [Message("user", said), *([Message("assistant", reply)] if reply else [])]
                correct, _ = judge(q, said, reply, bool(reply), 0.0, None, None)
                rows.append(
                    {
                        "conversation": conv.id,
                        "question": q.id,
                        "held_out": q.held_out,
                        "input": said,
                        "opening": opening,
                        "reply": reply,
                        "correct": correct,
                        "speakable": bool(reply),
                        "s": round(time.perf_counter() - t0, 2),
                    }
                )
        report["ways"][way] = {"summary": summary(rows), "rows": rows}
        print(way, json.dumps(report["ways"][way]["summary"]), flush=True)
    small.close()
    large.close()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "opening.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
