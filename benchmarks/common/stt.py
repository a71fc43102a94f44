"""STT on the spoken eval's questions without a server, as the STT and turn stages would hear
them (eval_stt.py, eval_end_of_turn.py): a configuration (``MODEL@BEAM[+PROMPT]``) and its
Whisper backend, each question's clip padded as the STT stage pads a segment, or cut by the real
VAD as the server cuts it, and a split question transcribed again as one clip (the rejoin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.common.conversations import plan
from benchmarks.common.questions import Question
from benchmarks.common.speech import RATE, Speaker, Voice, question_speech, silence

__all__ = [
    "EDGE_S",
    "PRE_S",
    "TAIL_S",
    "Cut",
    "SttConfig",
    "VadCutter",
    "clips",
    "load_backend",
    "parse_config",
    "rejoined_text",
    "vad_cuts",
    "with_edges",
]

PRE_S = 0.3  # the stage's prefix padding (turn_detection.prefix_padding_ms)
TAIL_S = 0.096  # the stage's tail after the VAD stop (stages/stt.py)
EDGE_S = 1.0  # --cut vad: silence on either side of a question, as between a conversation's turns
FRAME = 320  # --cut vad: 20 ms frames at 16 kHz, as the wire delivers them


@dataclass(frozen=True)
class SttConfig:
    """An STT configuration: a catalog Whisper model, its beam size and its initial prompt."""

    model: str
    beam: int
    prompt: str = ""
    """"" for none, "history" for the conversation's previous transcripts, "tools" for the product's
    prompt for the evals' tools (benchmarks/eval_stt.py's ``tools_prompt``), else a literal text."""

    @property
    def label(self) -> str:
        """``MODEL@BEAM[+PROMPT]``, as :func:`parse_config` reads it."""
        return f"{self.model}@{self.beam}" + (f"+{self.prompt}" if self.prompt else "")


def parse_config(spec: str) -> SttConfig:
    """The configuration ``MODEL@BEAM[+PROMPT]`` names (PROMPT: see :attr:`SttConfig.prompt`);
    :class:`ValueError` when it is not of that form or BEAM is below 1."""
    head, _, prompt = spec.partition("+")
    model, _, beam = head.partition("@")
    if not model or not beam.isdigit() or int(beam) < 1:
        raise ValueError(f"config {spec!r}: expected MODEL@BEAM[+PROMPT], BEAM >= 1")
    return SttConfig(model.strip(), int(beam), prompt.strip())


def load_backend(config: SttConfig) -> Any:
    """The product's Whisper backend at ``config``'s beam size."""
    from voiceagent.backends.whisper import WhisperStt
    from voiceagent.config import load_config

    cfg = load_config(env={})
    return WhisperStt(config.model, cfg.cache_path, threads=cfg.stt.threads, beam_size=config.beam)


def clips(
    questions: list[Question], voices: list[Voice], speaker: Speaker, seed: int, pad: bool = True
) -> list[tuple[str, str, Question, np.ndarray]]:
    """(conversation id, voice label, question, float audio) in conversation order; the audio
    padded as the STT stage pads a segment, or with ``pad`` False the speech alone (``--cut vad``)."""
    out = []
    for conv in plan(questions, voices, seed, every_voice=True):
        for q in conv.questions:
            frames = question_speech(q, conv.voice, speaker)
            if pad:
                frames = silence(PRE_S) + frames + silence(TAIL_S)
            out.append((conv.id, conv.voice.label, q, np.frombuffer(frames, dtype=np.int16).astype(np.float32) / 32768))
    return out


Cut = tuple[float, float, np.ndarray]
"""A segment as the STT stage hands it on: (start ms, end ms, audio), padding included."""


def with_edges(speech: np.ndarray) -> np.ndarray:
    """``speech`` with ``EDGE_S`` of silence on either side, as the VAD hears a question."""
    edge = np.zeros(int(EDGE_S * RATE), np.float32)
    return np.concatenate([edge, speech, edge])


def vad_cuts(full: np.ndarray, probs: list[float], window_ms: float, vad: Any) -> list[Cut]:
    """The segments the VAD stage finds in ``full`` (:func:`with_edges`), given the model's
    probability per window (``probs``), cut and padded as the STT stage cuts them: from the
    speech start less ``vad.prefix_padding_ms`` to the speech end plus the tail."""
    from voiceagent.stages.vad import VadTracker

    tracker = VadTracker(window_ms)
    cuts: list[Cut] = []
    start: float | None = None
    for k, prob in enumerate(probs):
        for ev in tracker.feed(prob, (k + 1) * window_ms, vad.threshold, vad.min_speech_ms, vad.stop_ms):
            if ev.kind == "start":
                start = max(0.0, ev.audio_ms - vad.prefix_padding_ms)
            elif ev.kind == "stop" and start is not None:
                end = ev.audio_ms + TAIL_S * 1000
                cuts.append((start, end, full[int(start * RATE / 1000) : int(end * RATE / 1000)]))
                start = None
    return cuts


def rejoined_text(cuts: list[Cut], transcribe: Any) -> tuple[str, list[str]]:
    """What the turn stage makes of ``cuts`` (one turn): each segment transcribed, and from the
    second on, the turn so far transcribed again as one clip (:meth:`Endpointer.joined`, as the
    rejoin does with a free decoder).  Returns (the turn's text, each segment's text alone)."""
    import dataclasses

    from voiceagent.events import TranscriptSegment
    from voiceagent.stages.turn import Endpointer

    ep = Endpointer(speculative=False, use_model=False)
    alone: list[str] = []
    for start, end, audio in cuts:
        ep.on_speech_started()
        ep.on_speech_stopped(end - TAIL_S * 1000)
        text = str(transcribe(audio))
        alone.append(text)
        seg = TranscriptSegment(t=0.0, gen=0, text=text, audio=audio, start_ms=start, end_ms=end)
        joined = ep.joined(seg) if text.strip() else None
        whole = str(transcribe(joined.audio)) if joined is not None else ""
        if joined is not None and whole:
            ep.on_segment(dataclasses.replace(joined, text=whole), respond=False, alone=text)
        else:
            ep.on_segment(seg, respond=False)
    return ep.text, alone


class VadCutter:
    """``--cut vad``: the real silero VAD over a question, as a session's VAD stage runs it."""

    def __init__(self) -> None:
        from voiceagent.backends.silero import SileroVad
        from voiceagent.config import load_config

        self._vad = SileroVad()
        self._settings = load_config(env={}).vad

    def cuts(self, speech: np.ndarray) -> list[Cut]:
        """The segments of ``speech`` (float, 16 kHz, the question alone): with :func:`with_edges`
        around it, fed in 20 ms frames, cut by :func:`vad_cuts` with the ``[vad]`` settings."""
        stream = self._vad.stream()
        full = with_edges(speech)
        probs: list[float] = []
        for i in range(0, len(full), FRAME):
            probs += stream.process(full[i : i + FRAME])
        return vad_cuts(full, probs, 1000.0 * stream.window_samples / RATE, self._settings)
