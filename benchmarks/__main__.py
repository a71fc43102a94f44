"""The index of the benchmarks and evals: ``python -m benchmarks`` prints one line for each, the
command that runs it, how long it takes with its defaults, and what it measures.

The table below is written by hand and kept whole by tests/unit/test_benchmarks_index.py: every
module here that runs (``python -m benchmarks.NAME``) has a line, and every line names a module
that exists.  The times are for a 2-core CPU with no GPU (the AMD EPYC and Intel Xeon VMs of
docs/reports/): taken from the committed runs (``wall_s`` in docs/bench/, or the reports) where
one was recorded; a time marked ``~`` is an estimate from the work the defaults ask for (turns,
models, clips), not a timed run.  What each one does in full: its docstring (``--help``) and
docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One line of the index."""

    name: str
    """The module, run as ``python -m benchmarks.NAME``."""
    takes: str
    """How long a run with the defaults takes on 2 cores (``~``: estimated, not timed)."""
    measures: str
    """What it measures, in one line."""

    @property
    def command(self) -> str:
        return f"python -m benchmarks.{self.name}"


INDEX: tuple[Benchmark, ...] = (
    # One conversation's latency
    Benchmark("latency", "6 min", "end of speech -> first audio, 20 turns on the real server against a naive chain of the same models"),
    Benchmark("against_pipecat", "7 min", "the same turns through voiceagent and stock Pipecat on the same models (needs Pipecat's deps)"),
    Benchmark("sip_latency", "~4 min", "end of speech -> first audio over SIP (baresip, G.711 and G.722) against the WebSocket"),
    Benchmark("webrtc", "~5 min", "end of speech -> first heard audio, WebRTC against the WebSocket; bytes on the wire; idle CPU"),
    Benchmark("eagerness", "~5 min", "semantic_vad eagerness levels on the paused questions: false cut-offs and latency per level"),
    Benchmark("plots", "5 s", "no measurement: redraws a finished run's picture from its JSON (latency, Pipecat, concurrency, quality)"),
    Benchmark("startup", "2 min", "profile=auto's start-up: measuring every installed profile against starting at the remembered one"),
    # Many conversations, long runs
    Benchmark("concurrency", "~17 min", "1 to 12 conversations at once on real servers, batched engine against the pool: latency, CPU"),
    Benchmark("soak", "11 min", "4 sessions x 50 spoken turns on one server: every turn answered, latency and memory (8 x 100: 51 min)"),
    Benchmark("machine_detection", "~6 min", "placed SIP calls answered by a person or a machine: precision, recall, time to decide"),
    Benchmark("sip_calls", "~5 min", "1 to 8 SIP calls arriving at once against as many WebSocket sessions: answered, refused, latency"),
    Benchmark("fuzz", "2 min", "hostile protocol clients beside a good session: no crash, no 1011, every bad message answered"),
    Benchmark("fleet_sim", "2 s", "a simulated day of callers on a fleet: replicas, LLM GPUs and proxies a peak needs, callers refused"),
    # Interruptions and end of turn
    Benchmark("interruptions", "70 min (a group: 3)", "speech over the agent's reply, both modes: replies lost, interruptions honoured"),
    Benchmark("eval_sounds", "20 s", "the sound model alone on the interruption set's clips: speech heard by kind, its rule's changes"),
    Benchmark("noise", "~40 min", "the spoken eval in babble, music and street noise at 0-10 dB SNR: suppression off and on"),
    Benchmark("echo", "~3 min", "voiceagent talk on speakers through a simulated room: self-interruptions, echo cancellation on and off"),
    Benchmark("eval_end_of_turn", "3 min", "the turn model (audio) and the LLM (words) judging if a question has ended: AUC, turns held"),
    # Answers, transcripts, tools
    Benchmark("eval_quality", "38 min (12 a profile)", "the spoken eval, 67 questions in 5 voices: right answers, WER, cut-offs, latency"),
    Benchmark("eval_answers", "~3 min", "the LLM alone on the spoken eval's questions, as written or as heard: right answers per prompt"),
    Benchmark("eval_stt", "~6 min", "the STT alone on the spoken eval's 335 clips: WER and decode time per Whisper setting"),
    Benchmark("eval_tools", "~1 min", "the packaged LLMs' tool calls on 12 utterances: the right tool with the right arguments, or none"),
    Benchmark("eval_long_conversation", "~10 min", "a conference assistant spoken end to end: 45,000 characters of instructions, 5 tools"),
    Benchmark("eval_call_check", "~8 min", "llm.call_check's one token and llm.call_grounding: requests for a tool told from other words"),
    Benchmark("eval_phone_tools", "2 min", "a phone call with the call-control tools on and off: what the agent said and did, calls ended"),
    # The LLM engine
    Benchmark("llm_weights", "~1 min", "the LLM's speed per llm.quant: first token, per token, a long prompt (+1 min a type to convert)"),
    Benchmark("long_prompt", "1.5 min", "two callers with 11,000 tokens of the same instructions: first-token times at turns 1 and 10"),
    Benchmark("engine_turns", "~6 min", "the LLM engines alone under a paced load of conversations sharing long instructions"),
    Benchmark("attention", "~2 min", "the batched engine's steps with llama.cpp's flash attention on and off, by length of instructions"),
    # Memory and the semantic cache
    Benchmark("tts_memory", "~2 min", "Piper's resident memory over clauses of growing length: ORT's arena against the product's setting"),
    Benchmark("cache", "~3 min", "the semantic reply cache through the real server: first audio of the misses, then of the hits"),
    Benchmark("eval_cache", "~1 min", "the semantic cache's safety: precision and recall of a hit on written-down question pairs"),
)


def lines() -> list[str]:
    """The index as printed: a line a benchmark, then how to read it."""
    width = max(len(b.command) for b in INDEX)
    takes = max(len(b.takes) for b in INDEX)
    out = [f"{b.command:<{width}}  {b.takes:<{takes}}  {b.measures}" for b in INDEX]
    out += [
        "",
        f"{len(INDEX)} benchmarks; times on a 2-core CPU with the defaults (~: estimated, not timed).",
        "A benchmark's options: python -m benchmarks.NAME --help; how each works: docs/benchmarks.md.",
    ]
    return out


def main() -> int:
    print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
