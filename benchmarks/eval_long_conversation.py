#!/usr/bin/env python3
"""A deployed assistant's long conversation, spoken: 45,000 characters of instructions, five tools,
six tool turns among questions answered from the instructions (issue #48, item 6).

What a conference deploys: the server's own instructions (``llm.instructions``, a conference
assistant's schedule of about ``--chars`` characters, as benchmarks/long_prompt.py writes them;
evaluated once at start-up) and a client built on the official ``openai`` SDK that offers five
tools of its own in ``session.update`` and runs them when the model calls one (Realtime
``function_call`` → ``function_call_output`` → ``response.create``).  Every turn is spoken (Piper's
``joe`` and espeak-ng voices, ``--voices``) at a microphone's pace, silence between turns, one
conversation per voice on its own connection; the turns of a conversation follow each other
without a new connection.

Per turn it records what the server heard, the call it made (name and arguments) or the reply
it spoke, and the latency from the end of the spoken question to the first audio (a tool turn:
to the call, then from ``response.create`` to the answer's first audio).  A tool turn is
**right** when the expected tool is called once with the expected arguments (strings compared
case-insensitively, by containment; numbers exactly), and its answer after the result is counted
apart (it must hold a word of the result); a question for the instructions is right
when no tool is called and the reply holds the expected words.  A wrong turn is put down to
**stt** when the transcript lacks a word the right answer needs, else to the **llm**.

    .venv/bin/python -m benchmarks.eval_long_conversation --profiles default --out DIR
    .venv/bin/python -m benchmarks.eval_long_conversation --profiles fast,quality --out DIR   # both, one run
    .venv/bin/python -m benchmarks.eval_long_conversation --profiles fast+llm.call_check=true,fast --out DIR   # an A/B

Writes ``long_conversation.json`` to ``--out`` and prints one line a turn.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.prompts import instructions  # noqa: E402
from benchmarks.common.serve import ServeFailed, ServeProcess  # noqa: E402
from benchmarks.common.speech import RATE, Speaker, resolve_voices  # noqa: E402
from voiceagent.audio import resample  # noqa: E402
from voiceagent.transports.realtime_wire import WIRE_RATE  # noqa: E402

CHUNK_S = 0.02  # a microphone's frame
GAP_S = 1.0  # silence after the agent's last reply has played, before the next question


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


TOOLS = [
    _tool("get_weather", "Get the current weather in a city.", {"city": {"type": "string", "description": "The city"}}, ["city"]),
    _tool(
        "send_email",
        "Send an email for the attendee.",
        {"to": {"type": "string", "description": "Who to send it to"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        ["to", "subject"],
    ),
    _tool(
        "register_for_talk",
        "Register the attendee for a talk, by its number in the schedule.",
        {"talk": {"type": "integer", "description": "The talk's number"}},
        ["talk"],
    ),
    _tool(
        "set_reminder",
        "Remind the attendee of something in a number of minutes.",
        {"minutes": {"type": "integer", "description": "Minutes from now"}, "label": {"type": "string", "description": "What about"}},
        ["minutes"],
    ),
    _tool(
        "book_taxi",
        "Order a taxi that picks the attendee up at the main entrance.",
        {"destination": {"type": "string"}, "time": {"type": "string", "description": "When, e.g. 17:00"}},
        ["destination"],
    ),
]
"""Five tools of the conference's own app, offered by the client in ``session.update``."""


@dataclass(frozen=True)
class Turn:
    said: str
    tool: str | None
    """The tool a right reply calls (None: it answers from the instructions, no call)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Expected arguments: a string is found in the value (case-insensitively), a number equals it."""
    expect: tuple[str, ...] = ()
    """A reply without a call is right when it holds one of these (lower case)."""
    result: str = ""
    """What the client's tool answers."""
    needs: tuple[str, ...] = ()
    """Words the transcript must hold for the turn to be answerable (else a failure is the STT's)."""
    uses: tuple[str, ...] = ()
    """A tool turn: the answer after the result uses it when it holds one of these (lower case)."""


TURNS = [
    Turn("Where is the keynote held?", None, expect=("great hall",), needs=("keynote",)),
    Turn(
        "What's the weather like in Berlin today?",
        "get_weather",
        {"city": "berlin"},
        result="Berlin: 12 degrees and cloudy.",
        uses=("cloudy", "12 degrees", "twelve degrees"),
        needs=("weather", "berlin"),
    ),
    Turn(
        "Please register me for talk number twelve.",
        "register_for_talk",
        {"talk": 12},
        result="Registered for talk 12.",
        uses=("registered", "register"),
        needs=("register", "twelve|12"),
    ),
    Turn("When is lunch served?", None, expect=("noon", "12", "twelve"), needs=("lunch",)),
    Turn(
        "Remind me in ten minutes to call my boss.",
        "set_reminder",
        {"minutes": 10},
        result="Reminder set for 10 minutes from now.",
        uses=("remind",),
        needs=("remind", "ten|10"),
    ),
    Turn(
        "Send an email to Anna saying that I will be late.",
        "send_email",
        {"to": "anna"},
        result="Email sent to Anna.",
        uses=("sent",),
        needs=("email", "anna|ana"),
    ),
    Turn("What is the name of the Wi-Fi network?", None, expect=("northwind",), needs=("wi-fi|wifi|wi fi",)),
    Turn(
        "Book a taxi to the airport at five in the evening.",
        "book_taxi",
        {"destination": "airport"},
        result="Taxi booked to the airport for 17:00.",
        uses=("taxi", "booked"),
        needs=("taxi", "airport"),
    ),
    Turn(
        "Will it rain in London this afternoon?",
        "get_weather",
        {"city": "london"},
        result="London: showers this afternoon, 9 degrees.",
        uses=("shower", "rain"),
        needs=("rain", "london"),
    ),
]
"""Nine turns: six call a tool, three are answered from the instructions."""


@dataclass
class TurnRecord:
    profile: str
    voice: str
    index: int
    said: str
    expected_tool: str | None
    heard: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)
    reply: str = ""
    """The spoken reply: the answer after the tool's result on a tool turn."""
    right: bool = False
    answered_after_result: bool | None = None
    """A tool turn: the answer after the result was spoken, completed, and uses the result (one
    of the turn's ``uses`` words); None: no call was made."""
    failure: str | None = None
    """None (right), ``stt`` or ``llm``; or ``error``."""
    why: str = ""
    latency_ms: float | None = None
    """End of the question → the first response's first audio, or its call when it calls a tool."""
    answer_ms: float | None = None
    """A tool turn: ``response.create`` after the result → the answer's first audio."""
    error: str | None = None
    heard_until: float = field(default=0.0, repr=False)
    """When the turn's last reply has played to its end (monotonic; not reported)."""


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 -]", " ", text.lower()).split())


def _arg_ok(want: Any, got: Any) -> bool:
    if isinstance(want, bool) or not isinstance(want, (int, float)):
        return str(want).lower() in str(got).lower()
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return False


def judge(turn: Turn, rec: TurnRecord) -> None:
    """Fill ``rec.right``, ``failure`` and ``why`` from what was heard, called and said."""
    if rec.error:
        rec.failure, rec.why = "error", rec.error
        return
    heard = _norm(rec.heard)
    missing = [n for n in turn.needs if not any(re.search(rf"\b{re.escape(alt)}\b", heard) for alt in n.split("|"))]
    if turn.tool is None:
        said = _norm(rec.reply)
        if rec.calls:
            rec.why = f"called {rec.calls[0]['name']} for a question the instructions answer"
        elif not any(e in said for e in turn.expect):
            rec.why = f"the reply lacks {' / '.join(turn.expect)}"
        else:
            rec.right = True
    else:
        mine = [c for c in rec.calls if c["name"] == turn.tool]
        if not rec.calls:
            rec.why = "no call"
        elif len(rec.calls) > 1 or not mine:
            rec.why = "called " + ", ".join(c["name"] for c in rec.calls)
        else:
            try:
                args = json.loads(mine[0]["arguments"] or "{}")
            except json.JSONDecodeError:
                args = None
            if not isinstance(args, dict):
                rec.why = f"arguments not an object: {mine[0]['arguments'][:80]}"
            else:
                bad = [k for k, v in turn.args.items() if not _arg_ok(v, args.get(k))]
                if bad:
                    rec.why = "wrong " + ", ".join(f"{k}={args.get(k)!r}" for k in bad)
                else:
                    rec.right = True
    if not rec.right:
        rec.failure = "stt" if missing else "llm"
        if missing:
            rec.why += f" (heard without {', '.join(missing)})"


class Mic:
    """A microphone on the connection: 20 ms frames of silence, or of the speech given to :meth:`say`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._queue: asyncio.Queue[tuple[np.ndarray, asyncio.Future[float]]] = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def say(self, pcm16k: bytes) -> float:
        """Speak ``pcm16k`` (16 kHz int16); returns the monotonic time its last frame was sent."""
        pcm = resample(np.frombuffer(pcm16k, dtype=np.int16), RATE, WIRE_RATE)
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        await self._queue.put((pcm, done))
        return await done

    async def _send(self, frame: np.ndarray) -> None:
        await self.conn.input_audio_buffer.append(audio=base64.b64encode(frame.astype("<i2").tobytes()).decode())

    async def _run(self) -> None:
        step = int(WIRE_RATE * CHUNK_S)
        quiet = np.zeros(step, dtype=np.int16)
        t = time.monotonic()
        while True:
            if self._queue.empty():
                await self._send(quiet)
                t += CHUNK_S
                await asyncio.sleep(max(0.0, t - time.monotonic()))
                continue
            pcm, done = self._queue.get_nowait()
            for i in range(0, len(pcm), step):
                await self._send(pcm[i : i + step])
                t += CHUNK_S
                await asyncio.sleep(max(0.0, t - time.monotonic()))
            done.set_result(time.monotonic())

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class Events:
    """Every server event of the connection, read by one task; waits for the next of a type."""

    def __init__(self, conn: Any) -> None:
        self.seen: list[tuple[float, Any]] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(conn))

    async def _run(self, conn: Any) -> None:
        async for event in conn:
            self.seen.append((time.monotonic(), event))
            self._changed.set()

    async def next(self, kind: str, after: int, timeout_s: float) -> tuple[int, float, Any]:
        """The first event of type ``kind`` at index ``after`` or later: (its index, time, event)."""
        deadline = time.monotonic() + timeout_s
        i = after
        while True:
            while i < len(self.seen):
                t, ev = self.seen[i]
                if ev.type == "error":
                    raise RuntimeError(f"error event: {getattr(ev, 'error', ev)}")
                if ev.type == kind:
                    return i, t, ev
                i += 1
            if self._task.done():
                raise RuntimeError("the connection ended")
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} within {timeout_s:.0f} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def played_until(self, start: int, end: int, response_id: str) -> float | None:
        """When the listener has heard the whole of ``response_id``'s audio (events ``start`` to
        ``end``): its first delta's arrival plus the audio's length (24 kHz 16-bit), the server
        pacing it in real time; None without audio."""
        first = self.first_audio(start, end, response_id)
        if first is None:
            return None
        deltas = [ev.delta for _, ev in self.seen[start:end] if ev.type == "response.output_audio.delta" and ev.response_id == response_id]
        size = sum(len(base64.b64decode(d)) for d in deltas)
        return first + size / (WIRE_RATE * 2)

    def first_audio(self, start: int, end: int, response_id: str) -> float | None:
        for t, ev in self.seen[start:end]:
            if ev.type == "response.output_audio.delta" and ev.response_id == response_id:
                return t
        return None

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # the connection's own end
            await self._task


def _spoken(done: Any) -> str:
    parts = []
    for item in done.response.output or []:
        if item.type == "message":
            for c in item.content or []:
                parts.append(getattr(c, "transcript", None) or getattr(c, "text", None) or "")
    return " ".join(p for p in parts if p).strip()


async def conversation(url: str, profile: str, voice: Any, speaker: Speaker, timeout_s: float, turns: list[Turn]) -> list[TurnRecord]:
    """One conversation in ``voice``: ``turns`` in order, each judged."""
    from openai import AsyncOpenAI

    base = url.replace("ws://", "http://").rsplit("/realtime", 1)[0]
    client = AsyncOpenAI(api_key="not-needed", base_url=base)
    records: list[TurnRecord] = []
    async with client.realtime.connect(model="voiceagent") as conn:
        events = Events(conn)
        await conn.session.update(session={"type": "realtime", "tools": TOOLS, "tool_choice": "auto"})
        await events.next("session.updated", 0, 30)
        mic = Mic(conn)
        try:
            for k, turn in enumerate(turns):
                rec = TurnRecord(profile, voice.label, k, turn.said, turn.tool)
                try:
                    await one_turn(turn, rec, mic, events, speaker.speak(turn.said, voice), timeout_s)
                except Exception as exc:  # one turn's failure is reported; the conversation goes on
                    rec.error = f"{type(exc).__name__}: {exc}"[:300]
                judge(turn, rec)
                records.append(rec)
                mark = "ok " if rec.right else "BAD"
                what = ", ".join(f"{c['name']}({c['arguments']})" for c in rec.calls) or repr(rec.reply[:60])
                print(
                    f"[{profile} {voice.label}] {mark} {turn.said!r}: heard {rec.heard!r} -> {what}"
                    f"{' then ' + repr(rec.reply[:60]) if rec.calls else ''} {rec.latency_ms} ms"
                    f"{' (' + str(rec.failure) + ': ' + rec.why + ')' if not rec.right else ''}",
                    flush=True,
                )
                # A listener waits for the agent to finish speaking: the next question is no barge-in.
                await asyncio.sleep(max(0.0, rec.heard_until - time.monotonic()) + GAP_S)
        finally:
            await mic.close()
            await events.close()
    return records


async def one_turn(turn: Turn, rec: TurnRecord, mic: Mic, events: Events, pcm: bytes, timeout_s: float) -> None:
    start = len(events.seen)
    end_t = await mic.say(pcm)
    _, _, heard = await events.next("conversation.item.input_audio_transcription.completed", start, timeout_s)
    rec.heard = heard.transcript
    j, done_t, done = await events.next("response.done", start, timeout_s)
    calls = [item for item in done.response.output or [] if item.type == "function_call"]
    rec.calls = [{"name": c.name, "arguments": c.arguments, "call_id": c.call_id} for c in calls]
    if not calls:
        rec.reply = _spoken(done)
        audio_t = events.first_audio(start, j + 1, done.response.id)
        rec.latency_ms = None if audio_t is None else round((audio_t - end_t) * 1000)
        rec.heard_until = events.played_until(start, j + 1, done.response.id) or 0.0
        return
    rec.latency_ms = round((done_t - end_t) * 1000)
    for c in calls:
        output = {"type": "function_call_output", "call_id": c.call_id, "output": turn.result or "Done."}
        await mic.conn.conversation.item.create(item=output)
    create_at = len(events.seen)
    sent = time.monotonic()
    await mic.conn.response.create()
    k, _, answer = await events.next("response.done", create_at, timeout_s)
    rec.reply = _spoken(answer)
    said = _norm(rec.reply)
    rec.answered_after_result = answer.response.status == "completed" and any(re.search(rf"\b{re.escape(u)}", said) for u in turn.uses)
    audio_t = events.first_audio(create_at, k + 1, answer.response.id)
    rec.answer_ms = None if audio_t is None else round((audio_t - sent) * 1000)
    rec.heard_until = events.played_until(create_at, k + 1, answer.response.id) or 0.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(values, q)), 1)


def summary(records: list[TurnRecord]) -> dict[str, Any]:
    tool = [r for r in records if r.expected_tool]
    info = [r for r in records if not r.expected_tool]
    lat = [r.latency_ms for r in records if r.latency_ms is not None and not r.calls]
    calls = [r.latency_ms for r in records if r.latency_ms is not None and r.calls]
    answers = [r.answer_ms for r in records if r.answer_ms is not None]
    return {
        "turns": len(records),
        "right": sum(r.right for r in records),
        "tool_turns_right": f"{sum(r.right for r in tool)}/{len(tool)}",
        "instruction_turns_right": f"{sum(r.right for r in info)}/{len(info)}",
        "answered_after_result": f"{sum(bool(r.answered_after_result) for r in tool)}/{sum(r.calls != [] for r in tool)}",
        "failures": {f: sum(r.failure == f for r in records) for f in ("stt", "llm", "error")},
        "first_audio_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95), "n": len(lat)},
        "call_ms": {"p50": _pct(calls, 50), "p95": _pct(calls, 95), "n": len(calls)},
        "answer_after_result_ms": {"p50": _pct(answers, 50), "p95": _pct(answers, 95), "n": len(answers)},
    }


def run_profile(
    profile: str, overrides: dict[str, str], voices: list[Any], speaker: Speaker, timeout_s: float, turns: list[Turn], log_dir: Path | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"profile": profile}
    name, *own = profile.split("+")
    overrides = {**overrides, **dict(s.split("=", 1) for s in own)}
    t0 = time.monotonic()
    try:
        server = ServeProcess(overrides, ("--profile", name) if name != "default" else (), log_lines=None)
    except ServeFailed as exc:
        entry["error"] = str(exc)[-2000:]
        print(f"profile {profile}: did not start", flush=True)
        return entry
    entry["startup_s"] = round(time.monotonic() - t0, 1)
    entry["ran"] = server.ready.get("profile", name)
    print(f"profile {profile}: ready in {entry['startup_s']} s, running {entry['ran']!r}", flush=True)
    records: list[TurnRecord] = []
    try:
        for voice in voices:
            records += asyncio.run(conversation(server.url, profile, voice, speaker, timeout_s, turns))
    finally:
        server.stop(60)
        lines = server.lines()
        entry["server_log_tail"] = lines[-40:]
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / f"serve_{profile.replace('+', '_').replace('=', '-')}.log").write_text("".join(lines))
    entry["summary"] = summary(records)
    entry["turns"] = [{k: v for k, v in asdict(r).items() if k != "heard_until"} for r in records]
    return entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--profiles",
        default="default",
        help="comma-separated: default (what `serve` runs) or a profile's name, each with settings of its own as NAME+SECTION.KEY=VALUE",
    )
    ap.add_argument("--voices", default="piper:joe,espeak:en-us+m3,espeak:en-gb-x-rp")
    ap.add_argument("--chars", type=int, default=45_000, help="the instructions' length in characters")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a server setting for every profile")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="the longest wait for one event")
    ap.add_argument("--turns", help="only these turns (comma-separated indexes into TURNS), for a quick look")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "eval")
    args = ap.parse_args()
    voices, notes = resolve_voices(args.voices.split(","))
    text = instructions(args.chars)
    overrides = {
        "llm.instructions": text,
        # Room for the instructions (~4 characters a token), the tools and the conversation.
        "llm.context": str(1024 * -(-(args.chars // 4 + 3072) // 1024)),
        **dict(s.split("=", 1) for s in args.set),
    }
    speaker = Speaker(ROOT / ".cache" / "eval_long_conversation")
    started = time.monotonic()
    report: dict[str, Any] = {
        "machine": machine(),
        "command": "python -m benchmarks.eval_long_conversation " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "instructions_chars": len(text),
        "tools": [t["name"] for t in TOOLS],
        "turns_per_conversation": len(TURNS),
        "voices": [v.label for v in voices],
        "voice_notes": notes,
        "overrides": {k: (v if k != "llm.instructions" else f"<{len(v)} characters>") for k, v in overrides.items()},
        "profiles": [],
    }
    turns = [TURNS[int(i)] for i in args.turns.split(",")] if args.turns else TURNS
    for profile in args.profiles.split(","):
        report["profiles"].append(run_profile(profile, overrides, voices, speaker, args.timeout_s, turns, args.out / "logs"))
    report["wall_s"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long_conversation.json").write_text(json.dumps(report, indent=1) + "\n")
    for p in report["profiles"]:
        s = p.get("summary", {})
        print(f"{p['profile']} ({p.get('ran')}): {json.dumps(s)}")
    lat_ok = all("summary" in p for p in report["profiles"])
    return 0 if lat_ok else 1


if __name__ == "__main__":
    sys.exit(main())
