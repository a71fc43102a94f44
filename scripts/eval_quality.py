#!/usr/bin/env python3
"""Spoken quality evaluation: everyday questions asked aloud to the real server, per profile.

The questions (``scripts/eval_questions.toml``: facts, arithmetic, reminders, small talk and
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

    .venv/bin/python scripts/eval_quality.py                                   # all, about 15 min per profile
    .venv/bin/python scripts/eval_quality.py --profiles fast --limit 3 --voices espeak:en-us+m3 --out artifacts/quality
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import unicodedata
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from scripts import make_fixtures  # noqa: E402
from scripts.serve_process import ServeFailed, ServeProcess  # noqa: E402

RATE = 16000
QUESTIONS_FILE = ROOT / "scripts" / "eval_questions.toml"
CATEGORIES = ("facts", "arithmetic", "reminders", "small_talk", "followup")
TOOLS_CATEGORY = "tools"
"""Of scripts/eval_tool_questions.toml (``eval_stt.py --questions``): requests that call a tool."""
DEFAULT_PROFILES = "fast,balanced,quality"
DEFAULT_VOICES = ("espeak:en-us+m3", "espeak:en+f2", "espeak:en-gb-x-rp", "piper:joe", "flite:slt")
ENGINES = ("espeak", "piper", "flite", "festival")
# Stand-ins, in order, for a flite or festival voice whose program is not installed.
ESPEAK_STAND_INS = ("en-us+f4", "en-us+m7", "en-gb-scotland", "en-029")
ESPEAK_WPM = 160
TURNS_PER_CONVERSATION = 4
GAP_S = 10.0
"""Silence after each question: the answer (up to two sentences, about 9 s of Piper speech) is
heard before the next question, which would otherwise barge in and cut it."""
STT_FAIL_WER = 0.25
"""A failed question whose transcript has a higher word error rate is put down to STT, else to the LLM."""
WORDS_PER_S = 2.8
"""Piper joe's speaking rate at speed 1 (measured): estimates how long a reply plays."""


# ----------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    accept: tuple[str, ...]
    category: str
    reject: tuple[str, ...] = ()
    held_out: bool = False
    follows: str | None = None
    pause_ms: int = 0
    sentences: int = 2
    known_failure: bool = False
    echo_ok: bool = False
    """A greeting or farewell whose natural reply is the same words ("Goodbye, have a nice day."
    answered "Goodbye! Have a nice day!"): the echo rule of ``judge`` does not apply to it."""

    @property
    def parts(self) -> tuple[str, ...]:
        """The halves spoken with ``pause_ms`` of silence between them (one part: no pause)."""
        return tuple(p.strip() for p in self.text.split("|"))

    @property
    def spoken(self) -> str:
        return " ".join(self.parts)


def load_questions(path: Path = QUESTIONS_FILE) -> list[Question]:
    """The questions of ``path``, checked: unique ids, known categories, a pause where ``|`` is,
    and each follow-up right after the question it follows."""
    rows = tomllib.loads(path.read_text(encoding="utf-8")).get("question", [])
    known = set(Question.__dataclass_fields__)
    out: list[Question] = []
    for row in rows:
        extra = set(row) - known
        if extra:
            raise ValueError(f"{row.get('id')}: unknown field(s) {sorted(extra)}")
        q = Question(**{**row, "accept": tuple(row.get("accept", ())), "reject": tuple(row.get("reject", ()))})
        _check_question(q, out)
        out.append(q)
    return out


def _check_question(q: Question, before: list[Question]) -> None:
    problems = []
    if any(p.id == q.id for p in before):
        problems.append("duplicate id")
    if q.category not in (*CATEGORIES, TOOLS_CATEGORY):
        problems.append(f"category must be one of {(*CATEGORIES, TOOLS_CATEGORY)}")
    if not q.accept:
        problems.append("no accepted answers")
    if len(q.parts) > 2 or not all(q.parts):
        problems.append("at most one ' | ' pause, between two non-empty halves")
    if (len(q.parts) == 2) != (q.pause_ms > 0) or not (q.pause_ms == 0 or 300 <= q.pause_ms <= 1200):
        problems.append("pause_ms (300-1200) goes with a ' | ' in the text, and only then")
    if q.follows is not None and (not before or before[-1].id != q.follows):
        problems.append(f"follows {q.follows!r}, which must be the question just before it")
    if problems:
        raise ValueError(f"question {q.id}: {'; '.join(problems)}")


# ----------------------------------------------------------------------------- text scoring

_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_SMALL += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
NUMBER_WORDS = frozenset([*_SMALL, *_TENS[2:], "hundred", *(name for _, name in _SCALES)])
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_CONTRACTIONS = {
    "what's": "what is",
    "that's": "that is",
    "it's": "it is",
    "there's": "there is",
    "here's": "here is",
    "how's": "how is",
    "where's": "where is",
    "who's": "who is",
    "let's": "let us",
    "i'm": "i am",
    "you're": "you are",
    "we're": "we are",
    "they're": "they are",
    "i've": "i have",
    "you've": "you have",
    "i'll": "i will",
    "you'll": "you will",
    "i'd": "i would",
    "don't": "do not",
    "doesn't": "does not",
    "didn't": "did not",
    "isn't": "is not",
    "aren't": "are not",
    "can't": "cannot",
    "won't": "will not",
}
_SPELLING = {
    "colour": "color",
    "colours": "colors",
    "favourite": "favorite",
    "grey": "gray",
    "okay": "ok",
    "metres": "meters",
    "metre": "meter",
    "kilometres": "kilometers",
    "kilometre": "kilometer",
}
_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:st|nd|rd|th)?|[a-z]+(?:'[a-z]+)*")


def number_words(n: int) -> list[str]:
    """``n`` (≥ 0) in English words, without "and": 8848 → eight thousand eight hundred forty eight."""
    if n < 20:
        return [_SMALL[n]]
    if n < 100:
        return [_TENS[n // 10], *([_SMALL[n % 10]] if n % 10 else [])]
    if n < 1000:
        return [_SMALL[n // 100], "hundred", *(number_words(n % 100) if n % 100 else [])]
    for value, name in _SCALES:
        if n >= value:
            return [*number_words(n // value), name, *(number_words(n % value) if n % value else [])]
    raise AssertionError(n)  # pragma: no cover


def _number_token(tok: str) -> list[str]:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(st|nd|rd|th)?", tok)
    assert m is not None
    whole, frac, suffix = m.groups()
    words = number_words(int(whole)) if len(whole) <= 15 else [_SMALL[int(d)] for d in whole]
    if frac:
        words += ["point", *(_SMALL[int(d)] for d in frac)]
    if suffix:
        last = words[-1]
        words[-1] = _ORDINAL.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return words


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation; numbers written as words; common contractions and
    British spellings undone; the "and" inside a number dropped ("one hundred and five")."""
    t = text.lower().replace("’", "'").replace("‘", "'")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)  # 8,848 → 8848
    t = t.replace("%", " percent ").replace("°", " degrees ").replace("&", " and ").replace("+", " plus ").replace("=", " equals ")
    words: list[str] = []
    for tok in _TOKEN.findall(t):
        if tok[0].isdigit():
            words += _number_token(tok)
            continue
        tok = _CONTRACTIONS.get(tok, tok)
        for w in tok.split():
            w = w.replace("'", "")
            words.append(_SPELLING.get(w, w))
    return [
        w
        for i, w in enumerate(words)
        if not (w == "and" and 0 < i < len(words) - 1 and words[i - 1] in NUMBER_WORDS and words[i + 1] in NUMBER_WORDS)
    ]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance (substitutions, insertions, deletions)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference``, both normalized."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    return edit_distance(ref, hyp) / max(1, len(ref))


def _same_word(a: str, b: str) -> bool:
    return a == b or a in (b + "s", b + "es") or b in (a + "s", a + "es")


def _contains(hay: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``hay`` as whole words; a number in it is not part of a longer one."""
    n = len(needle)
    for i in range(len(hay) - n + 1):
        if not all(_same_word(h, w) for h, w in zip(hay[i : i + n], needle, strict=True)):
            continue
        before = hay[i - 1] if i else ""
        after = hay[i + n] if i + n < len(hay) else ""
        if needle[0] in NUMBER_WORDS and (before in NUMBER_WORDS or before == "point"):
            continue
        if needle[-1] in NUMBER_WORDS and (after in NUMBER_WORDS or after == "point"):
            continue
        return True
    return False


ECHO_MIN_WORDS = 4


def echoes(question: str, reply: str) -> bool:
    """The reply only repeats the question (all of a question of ``ECHO_MIN_WORDS`` or more words
    appears in it as one run, or the reply is the question's words): not an answer, whatever the
    accepted words say ("Remind me to buy milk." answered "Remind me to buy milk.")."""
    q, r = normalize(question), normalize(reply)
    if not q or not r:
        return False
    return r == q or (len(q) >= ECHO_MIN_WORDS and _contains(r, q))


def answer_correct(reply: str, accept: tuple[str, ...] | list[str], reject: tuple[str, ...] | list[str] = ()) -> bool:
    """The reply contains one of ``accept`` (words or phrases, numbers as digits or words) and
    none of ``reject``."""
    words = normalize(reply)
    if any(_contains(words, normalize(r)) for r in reject):
        return False
    return any(_contains(words, normalize(a)) for a in accept if normalize(a))


_ABBREVIATIONS = re.compile(r"\b(?:mr|mrs|ms|dr|st|vs|etc|e\.g|i\.e|u\.s|u\.k|a\.m|p\.m|approx|no)\.", re.IGNORECASE)
_LIST = re.compile(r"(?:^|\n)\s*(?:[-*•+]|\d+[.)])\s+\S")
_INLINE_LIST = re.compile(r"(?:^|\s)\d+[.)]\s+\S")
_MARKDOWN = re.compile(r"\*\*|__|`|^\s*#|\[[^\]]+\]\([^)]*\)|^\s*>|\*[^*\s][^*\n]*\*", re.MULTILINE)


def count_sentences(text: str) -> int:
    """Sentences in ``text``: ends at . ! ? …, not inside 3.14 or after Mr. or e.g."""
    t = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", ""), text)
    t = re.sub(r"(?<=\d)\.(?=\d)", "", t)
    return sum(1 for part in re.split(r"[.!?…]+", t) if re.search(r"\w", part))


def _is_emoji(ch: str) -> bool:
    cp = ord(ch)
    return cp >= 0x1F000 or 0x2600 <= cp <= 0x27BF or cp == 0xFE0F or unicodedata.category(ch) == "So"


def speakable_problems(reply: str, max_sentences: int = 2) -> list[str]:
    """Why ``reply`` is not fit to be spoken: a list, markdown, emoji, more than ``max_sentences``
    sentences.  Empty: speakable."""
    problems = []
    if _LIST.search(reply) or len(_INLINE_LIST.findall(reply)) >= 2:
        problems.append("list")
    if _MARKDOWN.search(reply):
        problems.append("markdown")
    if any(_is_emoji(ch) for ch in reply):
        problems.append("emoji")
    n = count_sentences(reply)
    if n > max_sentences:
        problems.append(f"{n} sentences")
    return problems


def unfinished(reply: str) -> bool:
    """The reply stops mid-sentence (``llm.max_tokens`` reached, or cut by a barge-in)."""
    return bool(reply.strip()) and not re.search(r"[.!?…][\"')\]]*\s*$", reply.strip())


# ----------------------------------------------------------------------------- voices and speech


@dataclass(frozen=True)
class Voice:
    engine: str
    name: str
    asked: str = ""
    """The voice asked for, when this one stands in for it (its program is not installed)."""

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.name}"


def resolve_voices(specs: list[str], which: Any = shutil.which) -> tuple[list[Voice], list[str]]:
    """The voices to speak in, and a note for each one that had to stand in for another."""
    voices: list[Voice] = []
    notes: list[str] = []
    for spec in specs:
        engine, _, name = spec.partition(":")
        if engine not in ENGINES or not name:
            raise ValueError(f"voice {spec!r}: expected ENGINE:NAME, ENGINE one of {', '.join(ENGINES)}")
        voice = Voice(engine, name)
        if engine == "flite" and which("flite") is None and which("text2wave") is not None:
            voice = Voice("festival", "kal_diphone", asked=spec)
            notes.append(f"{spec}: flite is not installed; Debian's festival (kal_diphone) speaks instead")
        elif (engine == "flite" and which("flite") is None) or (engine == "festival" and which("text2wave") is None):
            taken = {v.label for v in voices} | set(specs)
            name = next((s for s in ESPEAK_STAND_INS if f"espeak:{s}" not in taken), ESPEAK_STAND_INS[0])
            voice = Voice("espeak", name, asked=spec)
            notes.append(f"{spec}: flite and festival are not installed (apt-get install flite); espeak-ng {name} speaks instead")
        voices.append(voice)
    return voices, notes


class Speaker:
    """Speech for a text in a voice: 16 kHz mono int16 without leading/trailing silence, cached as
    WAV files under ``cache`` (keyed by voice and text)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self._piper: dict[str, Any] = {}

    def speak(self, text: str, voice: Voice) -> bytes:
        key = hashlib.sha256(f"{voice.label}|{ESPEAK_WPM}|{text}".encode()).hexdigest()[:20]
        target = self.cache / "speech" / voice.label.replace(":", "_").replace("+", "_") / f"{key}.wav"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "speech.wav"
                self._synthesize(text, voice, raw)
                frames = make_fixtures._read(raw)  # without the engine's own leading/trailing silence
            part = target.with_suffix(".part")
            with wave.open(str(part), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(RATE)
                w.writeframes(frames)
            part.replace(target)
        with wave.open(str(target), "rb") as w:
            return w.readframes(w.getnframes())

    def _synthesize(self, text: str, voice: Voice, out: Path) -> None:
        if voice.engine == "espeak":
            make_fixtures._espeak(text, voice.name, ESPEAK_WPM, out)
        elif voice.engine == "piper":
            from voiceagent.audio import resample, write_wav
            from voiceagent.backends.piper_tts import PiperTts

            if voice.name not in self._piper:
                self._piper[voice.name] = PiperTts(voice.name, threads=1)
            tts = self._piper[voice.name]
            pcm = np.concatenate(list(tts.synthesize(text, 1.0)))
            write_wav(out, resample(pcm, tts.sample_rate, RATE), RATE)
        else:
            raw = out.with_suffix(".raw.wav")
            if voice.engine == "flite":
                subprocess.run(["flite", "-voice", voice.name, "-t", text, "-o", str(raw)], check=True, capture_output=True)
            else:
                cmd = ["text2wave", "-o", str(raw), "-eval", f"(voice_{voice.name})"]
                subprocess.run(cmd, input=text, text=True, check=True, capture_output=True)
            subprocess.run(["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)], check=True)


# ----------------------------------------------------------------------------- conversations


@dataclass
class Conversation:
    id: str
    voice: Voice
    questions: list[Question]
    path: Path | None = None
    starts_s: list[float] = field(default_factory=list)
    """When each question's speech begins in the file (ground truth, from its energy)."""


def units(questions: list[Question]) -> list[list[Question]]:
    """Questions that must stay together and in order: a lead question and its follow-ups."""
    out: list[list[Question]] = []
    for q in questions:
        if q.follows is not None and out and out[-1][-1].id == q.follows:
            out[-1].append(q)
        else:
            out.append([q])
    return out


def plan(
    questions: list[Question], voices: list[Voice], seed: int, *, per_conversation: int = TURNS_PER_CONVERSATION, every_voice: bool = False
) -> list[Conversation]:
    """Pack the questions (shuffled by ``seed``, a follow-up kept right after its lead) into
    conversations of at most ``per_conversation`` turns; the voices take turns, one per
    conversation (``every_voice``: every conversation is spoken in every voice)."""
    rng = random.Random(seed)
    groups = units(questions)
    rng.shuffle(groups)
    packed: list[list[Question]] = []
    for g in groups:
        if packed and len(packed[-1]) + len(g) <= per_conversation:
            packed[-1].extend(g)
        else:
            packed.append(list(g))
    offset = rng.randrange(len(voices))
    convs: list[Conversation] = []
    for i, qs in enumerate(packed):
        chosen = voices if every_voice else [voices[(i + offset) % len(voices)]]
        for v in chosen:
            convs.append(Conversation(f"c{i:02d}-{re.sub(r'[^a-z0-9]+', '-', v.label.lower())}", v, qs))
    return convs


def silence(seconds: float) -> bytes:
    """``seconds`` of 16 kHz int16 silence."""
    return b"\x00\x00" * int(seconds * RATE)


def question_speech(q: Question, voice: Voice, speaker: Speaker) -> bytes:
    """The question spoken in ``voice`` (16 kHz int16), its mid-sentence pause as silence between its parts."""
    return silence(q.pause_ms / 1000).join(speaker.speak(part, voice) for part in q.parts)


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
        cutoffs=result.cutoffs if result is not None else 0,
        overrun=overrun,
        failure=failure,
        error=error,
    )


def judge(
    q: Question, transcript: str, reply: str, answered: bool, turn_wer: float, error: str | None, lead_wer: float | None
) -> tuple[bool, str | None]:
    """Whether the reply to ``q`` is right (an accepted answer, not an echo of the question or of
    what was heard), and if not, the stage that most likely failed."""
    echo = answered and not q.echo_ok and (echoes(q.spoken, reply) or echoes(transcript, reply))
    correct = answered and not echo and answer_correct(reply, q.accept, q.reject)
    return correct, None if correct else failure_guess(turn_wer, answered, error, lead_wer)


def failure_guess(turn_wer: float, answered: bool, error: str | None = None, lead_wer: float | None = None) -> str:
    """Which stage most likely failed a question answered wrongly (or not at all)."""
    if error:
        return "error"
    if turn_wer > STT_FAIL_WER:
        return "stt"
    if lead_wer is not None and lead_wer > STT_FAIL_WER:
        return "stt (the lead question)"
    if not answered:
        return "no reply (endpointing or timeout)"
    return "llm"


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.array(values, dtype=np.float64), q)), 1) if values else None


def _share(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def metrics(records: list[TurnRecord]) -> dict[str, Any]:
    """Scores of a set of turns: WER over all their words, shares in %, latency in ms."""
    answered = [r for r in records if r.answered]
    lat = [r.latency_ms for r in records if r.latency_ms is not None]
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


async def replay_all(url: str, convs: list[Conversation], profile: str, timeout_s: float) -> list[TurnRecord]:
    """Each conversation over its own connection, one after the other, at real-time pace."""
    from voiceagent.replay import replay_file

    records: list[TurnRecord] = []
    for n, conv in enumerate(convs, 1):
        assert conv.path is not None
        error = None
        results: list[Any] = []
        try:
            results = await replay_file(url, conv.path, timeout_s=timeout_s)
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
    return records


def variant(spec: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME+SECTION.KEY=VALUE[+...]`` (a profile with settings of its own, compared
    in the same run as the profile itself) → (the profile, its own settings)."""
    name, *sets = spec.split("+")
    bad = [s for s in sets if "=" not in s or "." not in s.split("=", 1)[0]]
    if bad:
        raise ValueError(f"{spec!r}: expected NAME+SECTION.KEY=VALUE, got {bad[0]!r}")
    return name, dict(s.split("=", 1) for s in sets)


def run_profile(spec: str, overrides: dict[str, str], convs: list[Conversation], timeout_s: float) -> dict[str, Any]:
    from scripts.bench_latency import cpu_times
    from voiceagent.config import load_config

    entry: dict[str, Any] = {}
    profile, own = variant(spec)
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
    steal0, total0 = cpu_times()
    t1 = time.monotonic()
    try:
        records = asyncio.run(replay_all(server.url, convs, spec, timeout_s))
    finally:
        server.stop(30)
    steal1, total1 = cpu_times()
    entry["wall_s"] = round(time.monotonic() - t1, 1)
    entry["cpu_steal_pct"] = round(100.0 * (steal1 - steal0) / max(1, total1 - total0), 1)
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
        "| speakable % | false cut-offs | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, e in profiles.items():
        s = e["summary"]
        fc = s["false_cutoffs"]
        label = f"{p} (auto: {e['auto_chose']})" if "auto_chose" in e else p
        lines.append(
            f"| {label} | {e['models']['stt']} | {e['models']['llm']} | {s['answered']}/{s['questions']} | {_cell(s['wer_pct'])} "
            f"| {_cell(s['accuracy_pct'])} | {_cell(e['tuned']['accuracy_pct'])} | {_cell(e['held_out']['accuracy_pct'])} "
            f"| {_cell(e['known_failures']['accuracy_pct'])} | {_cell(s['speakable_pct'])} | {fc['cut_off']}/{fc['paused_questions']} "
            f"| {_cell(s['latency_ms']['p50'])} | {_cell(s['latency_ms']['p95'])} |"
        )
    lines += [
        "",
        "WER over all words of the transcripts (case, punctuation and numbers normalized).  Accuracy: the reply contains an "
        "accepted answer (unanswered questions count as wrong).  Speakable: of the answered, no list, markdown or emoji and at most "
        "two sentences unless asked for more.  False cut-offs: paused questions whose answer began before the question ended.  "
        "Latency: end of speech → first audio byte at the client.  Held-out questions are not to be used when tuning "
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


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for p, e in report["profiles"].items():
        if "summary" not in e or e["summary"]["latency_ms"]["p50"] is None:
            continue
        s, lat = e["summary"], e["summary"]["latency_ms"]
        (dot,) = ax.plot(lat["p50"], s["accuracy_pct"], "o", markersize=9, label=f"{p} ({e['models']['stt']}, {e['models']['llm']})")
        if lat["p95"] is not None:
            ax.plot([lat["p50"], lat["p95"]], [s["accuracy_pct"]] * 2, "-", color=dot.get_color(), alpha=0.4, lw=2)
        if e["held_out"]["accuracy_pct"] is not None:
            ax.plot(lat["p50"], e["held_out"]["accuracy_pct"], "o", mfc="none", color=dot.get_color(), markersize=9)
        ax.annotate(p, (lat["p50"], s["accuracy_pct"]), textcoords="offset points", xytext=(8, 4))
    ax.set_xlabel("end of speech → first audio, p50 ms (line to p95)")
    ax.set_ylabel("answer accuracy % (hollow: held-out questions)")
    ax.set_ylim(0, 105)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Spoken quality against latency, per profile")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--profiles",
        default=DEFAULT_PROFILES,
        help="comma-separated; 'default': serve without --profile; NAME+SECTION.KEY=VALUE: the profile with that setting",
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
    args = ap.parse_args()

    from scripts.bench_latency import machine

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
        "command": " ".join(["scripts/eval_quality.py", *sys.argv[1:]]),
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
        report["profiles"][profile] = run_profile(profile, overrides, convs, args.timeout)
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
