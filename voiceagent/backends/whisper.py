"""Speech-to-text with faster-whisper (CTranslate2): Whisper tiny or base from packages, or any
CTranslate2 Whisper given as a path or a hub id (:mod:`voiceagent.models.source`).

Two decoding paths:

* ``window_s = 30``: faster-whisper's own ``transcribe`` — the encoder always sees a 30 s window,
  so one decode costs the same for 1 s or 10 s of speech (~0.3 s for tiny on 2 cores).
* ``window_s = 0`` (auto, the default) or 1..29: the clip is padded only to a short window
  (the clip plus 1 s, rounded up to 5 s, at least 10 s) and CTranslate2 encodes just that.  The
  encoder cost falls roughly in proportion (tiny: ~35 ms for 10 s instead of ~260 ms), and on the
  spoken fixtures the transcripts matched the 30 s path; ``benchmarks/latency.py`` measures both.

Repetition loops: greedy Whisper on the short window can write one phrase until its
length limit ("Tell me... Tell me..." for 112 tokens from the first 0.6 s of a sentence; a whole
sentence 10-12 times from 4-5 s of audio that starts with 2 s of silence; tiny and base alike;
the 30 s window did not loop on the same clips).  Every decode is judged by
:mod:`voiceagent.text.stt_guard`.  A looping decode is decoded once more with a repetition penalty
(:data:`RETRY_REPETITION_PENALTY`; on the short-window path it reuses the encoder output, so the
retry is one decoder pass: 30-90 ms for tiny, 110-170 ms for base), and if that loops too the
guard's cut is returned.  The window path also stops the decoder at
:func:`voiceagent.text.stt_guard.max_tokens` for the clip's length, so a loop ends after a few copies
(measured with the retry: tiny 0.6 s clips 0.6 s -> 0.25-0.3 s, base 4-5 s clips 1.2 s ->
0.8-1.05 s).  A decode that does not loop is unchanged: same options, same text, same cost.

Prompt echoes: a decode with a transcription prompt that wrote only the prompt's words back
(:func:`voiceagent.text.stt_prompt.echoes_prompt`) is decoded once more without the prompt.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.feature_extractor import FeatureExtractor

from voiceagent.audio import Float32Array
from voiceagent.backends.protocols import SttRequest, Transcript
from voiceagent.backends.whisper_sounds import read_as_sounds, sound_suppression
from voiceagent.models.checks import check_language
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.text.backchannel import SOUND_SPELLINGS
from voiceagent.text.stt_guard import check, max_tokens
from voiceagent.text.stt_prompt import echoes_prompt

__all__ = ["MAX_PROMPT_TOKENS", "RETRY_REPETITION_PENALTY", "WhisperStt", "confidence", "decode_guarded", "model_dir", "window_frames"]

log = logging.getLogger(__name__)

_RATE = 16000
_HOP = 160
_NO_SPEECH = 0.6
MAX_PROMPT_TOKENS = 96
"""Of a transcription prompt, the last this many tokens are kept.  Whisper allows 223; a long
prompt costs decode time on every segment (beam search runs it per beam: the four eval tools'
41-token prompt added about 15 ms per clip to base at beam 5), and the text that helps is a few
names and words."""
_MAX_NEW_TOKENS = 112
"""What the window path allowed before the guard (``max_length=224``, see :func:`_max_length`)."""
RETRY_REPETITION_PENALTY = 1.2
"""For the one retry of a looping decode.  On the 12 loops reproduced (tiny and base, espeak-ng
voices) 1.2 ended all of them after one copy; 1.05 and 1.1 left some looping; sampling at
temperature 0.2-0.8 (Whisper's own fallback) left a third to a half of them looping and garbled others."""


_RECENT_CLIPS = 8


def _clip_key(audio: Float32Array) -> tuple[int, int]:
    """A clip's identity for :attr:`WhisperStt._recent` (its length and its samples' hash)."""
    return len(audio), hash(audio.tobytes())


def model_dir(name: str, cache_dir: Path) -> Path:
    """The CTranslate2 model folder ``stt.model = name`` stands for: a catalog model's (joined once
    if split), a path, or a hub id's cached snapshot; checked to be a CTranslate2 Whisper folder."""
    return resolve("stt", name, cache_dir).path


def window_frames(samples: int, window_s: int) -> int:
    """Encoder frames (10 ms each) for a clip of ``samples``: see the module docstring."""
    if window_s >= 30:
        return 3000
    need = samples / _RATE + 1.0
    seconds = max(window_s, math.ceil(need)) if window_s > 0 else max(10, 5 * math.ceil(need / 5))
    return min(3000, seconds * 100)


def _max_length(new_tokens: int, prompt: int) -> int:
    """The ``max_length`` that lets CTranslate2 4.x's Whisper ``generate`` write at most
    ``new_tokens`` after a decoder prompt of ``prompt`` tokens (``<|startoftranscript|>`` to
    ``<|notimestamps|>``, and any ``<|startofprev|>`` text before them).  Measured on tiny.en and
    base, greedy and beam 5: it writes at most ``min(max_length // 2, max_length - prompt + 1)``
    (224 gives 112 without a text prompt; a 41-token text prompt with max_length 20 gives nothing)."""
    return max(2 * new_tokens, new_tokens + prompt - 1)


def confidence(mean_logprob: float, no_speech_prob: float) -> float:
    """How sure Whisper is of a transcript (0..1): the geometric mean of its tokens'
    probabilities (``exp`` of their mean log-probability) times the probability that the clip
    holds speech.  Either factor alone left a short real interruption ("No.") and a sound Whisper
    wrote as a word (a sneeze as "2.") too close together (docs/decisions/interruptions.md)."""
    return math.exp(min(mean_logprob, 0.0)) * (1.0 - min(max(no_speech_prob, 0.0), 1.0))


def decode_guarded(decode: Callable[[float], tuple[str, int]], seconds: float) -> tuple[str, str]:
    """Run ``decode(repetition_penalty) -> (text, tokens)`` for ``seconds`` of audio, never passing
    a loop on: a decode the guard judges looping is run once more with
    :data:`RETRY_REPETITION_PENALTY`, and if that loops too the guard's cut of the retry is
    returned.  Returns ``(text, outcome)``, outcome ``""`` (no loop), ``"retried"`` or ``"cut"``."""
    text, tokens = decode(1.0)
    first = check(text, seconds, tokens)
    if not first.looped:
        return text, ""
    retry, tokens = decode(RETRY_REPETITION_PENALTY)
    second = check(retry, seconds, tokens)
    if not second.looped:
        log.warning("STT decode of %.1f s looped (%s, %d chars); the retry did not: %r", seconds, first.reason, len(text), retry)
        return retry, "retried"
    log.warning("STT decode of %.1f s looped (%s), and its retry (%s): cut to %r", seconds, first.reason, second.reason, second.text)
    return second.text, "cut"


class WhisperStt:
    """Whole-clip decoding, greedy by default.  Thread-confined to ``executor``.

    ``name``: ``stt.model``'s value (a catalog name, a CTranslate2 Whisper folder or a hub id).
    ``language``: the configured ``stt.language``; an English-only model refuses any other with
    a one-line ModelError before it loads.
    """

    def __init__(
        self,
        name: str,
        cache_dir: Path,
        threads: int,
        beam_size: int,
        window_s: int = 0,
        device: str = "cpu",
        compute_type: str = "auto",
        language: str = "en",
    ) -> None:
        if compute_type == "auto":
            compute_type = "float16" if device == "cuda" else "int8"
        source = resolve("stt", name, cache_dir)
        check_language(source.path, language, source.label)
        self._model = WhisperModel(
            str(source.path),
            device=device,
            compute_type=compute_type,
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,
        )
        self._beam_size = beam_size
        self._window_s = window_s
        self._device = device
        self._features = FeatureExtractor(feature_size=self._model.feature_extractor.mel_filters.shape[0])
        tok = self._model.hf_tokenizer
        self._sot = [tok.token_to_id("<|startoftranscript|>")]
        self._prev = tok.token_to_id("<|startofprev|>")
        self._multilingual = bool(self._model.model.is_multilingual)
        self._task = tok.token_to_id("<|transcribe|>")
        self._no_ts = tok.token_to_id("<|notimestamps|>")
        self._tokenizer = tok
        self._eot = tok.token_to_id("<|endoftext|>")
        self._suppress: dict[tuple[str, ...], list[int]] = {}
        self._recent: OrderedDict[tuple[int, int], ctranslate2.StorageView] = OrderedDict()
        """The encodings of the last clips transcribed on the short-window path, which
        :meth:`read_as_sounds` reuses (it is asked about a segment just transcribed)."""
        self.executor = PriorityExecutor("stt")
        self.loops = 0
        """Decodes the guard judged looping (each was retried)."""
        self.cuts = 0
        """Of those, the ones whose retry looped too, so the guard's cut was returned."""
        self.echoes = 0
        """Decodes that wrote their prompt back (:func:`~voiceagent.text.stt_prompt.echoes_prompt`),
        each decoded again without it."""

    def transcribe(self, audio: Float32Array, language: str, prompt: str = "") -> str:
        seconds = len(audio) / _RATE
        frames = window_frames(len(audio), self._window_s)
        encoded = self._encode(audio, frames) if frames < 3000 else None
        # The 30 s path hands the text to faster-whisper, which tokenizes it itself.
        prefix = self._prompt_tokens(prompt) if encoded is not None else []

        def decode(repetition_penalty: float) -> tuple[str, int]:
            if encoded is None:
                return self._transcribe_full(audio, language, repetition_penalty, prompt)
            return self._generate(encoded, language, repetition_penalty, seconds, prefix)

        text, outcome = decode_guarded(decode, seconds)
        if encoded is not None:
            self._recent[_clip_key(audio)] = encoded
            while len(self._recent) > _RECENT_CLIPS:
                self._recent.popitem(last=False)
        if outcome:
            self.loops += 1
        if outcome == "cut":
            self.cuts += 1
        if prompt.strip() and echoes_prompt(text, prompt):
            # The decoder wrote its prompt back instead of the speech: hear it again unprompted.
            self.echoes += 1
            return self.transcribe(audio, language, "")
        return text

    def read_as_sounds(self, audio: Float32Array, language: str, phrases: tuple[str, ...], text: str) -> float | None:
        """:class:`~voiceagent.backends.protocols.SoundReader`: the margin of
        :func:`~voiceagent.backends.whisper_sounds.read_as_sounds` against ``text`` (the
        transcript being judged, as the loop guard left it: never a raw decode that looped), with
        ``phrases`` and :data:`~voiceagent.text.backchannel.SOUND_SPELLINGS` as its words; None
        on the 30 s path or for no text.  A clip this backend has just transcribed is not encoded
        again."""
        frames = window_frames(len(audio), self._window_s)
        ids = self._tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids if text.strip() else []
        if frames >= 3000 or not ids:
            return None
        suppress = self._suppress.get(phrases)
        if suppress is None:  # some 50,000 ids: made once per list
            suppress = self._suppress[phrases] = sound_suppression(self._tokenizer, (*phrases, *SOUND_SPELLINGS), self._eot)
        prompt = self._decoder_prompt([], language)
        encoded = self._recent.get(_clip_key(audio))
        if encoded is None:
            encoded = self._encode(audio, frames)

        def repeat(n: int) -> ctranslate2.StorageView:
            if self._device == "cpu":  # the encoding is in host memory: copied, not encoded again
                return ctranslate2.StorageView.from_array(np.repeat(np.asarray(encoded), n, axis=0))
            return self._encode_many([audio] * n, frames)  # in device memory: encoded again as one batch

        reading = read_as_sounds(
            self._model.model, lambda ids: str(self._tokenizer.decode(ids)), encoded, repeat, prompt, suppress, self._eot, ids
        )
        log.debug("read as sounds: %r as %r, margin %.2f", text, reading.sounds, reading.margin)
        return reading.margin

    def _prompt_tokens(self, prompt: str) -> list[int]:
        """``<|startofprev|>`` and the last :data:`MAX_PROMPT_TOKENS` tokens of ``prompt`` (none
        for ""), as Whisper was trained to read the text before a window."""
        if not prompt.strip():
            return []
        ids = self._tokenizer.encode(" " + prompt.strip(), add_special_tokens=False).ids
        return [self._prev, *ids[-MAX_PROMPT_TOKENS:]]

    def _transcribe_full(self, audio: Float32Array, language: str, repetition_penalty: float, prompt: str) -> tuple[str, int]:
        segments, _info = self._model.transcribe(
            audio,
            language=language if self._multilingual else None,
            initial_prompt=prompt.strip() or None,
            beam_size=self._beam_size,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            temperature=0.0,
            repetition_penalty=repetition_penalty,
        )
        # ``segments`` is lazy: the decoding happens in this loop, in the STT executor.
        texts: list[str] = []
        tokens = 0
        logprob = no_speech = 0.0
        for seg in segments:
            texts.append(seg.text.strip())
            tokens += len(seg.tokens)
            logprob += seg.avg_logprob * len(seg.tokens)
            no_speech = max(no_speech, seg.no_speech_prob)
        sure = confidence(logprob / tokens, no_speech) if tokens else None
        return Transcript(" ".join(texts).strip(), sure), tokens

    def _encode(self, audio: Float32Array, frames: int) -> ctranslate2.StorageView:
        return self._encode_many([audio], frames)

    def _encode_many(self, clips: Sequence[Float32Array], frames: int) -> ctranslate2.StorageView:
        """One encoder pass over ``clips``, each padded with silence to ``frames``."""
        feats = np.empty((len(clips), self._features.mel_filters.shape[0], frames), dtype=np.float32)
        for row, audio in zip(feats, clips, strict=True):
            padded = np.zeros(frames * _HOP, dtype=np.float32)
            n = min(len(audio), len(padded))
            padded[:n] = audio[:n]
            row[:] = self._features(padded, padding=0)[:, :frames]
        return self._model.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)

    def _decoder_prompt(self, prefix: list[int], language: str) -> list[int]:
        prompt = [*prefix, *self._sot]
        if self._multilingual:
            prompt += [self._tokenizer.token_to_id(f"<|{language}|>"), self._task]
        prompt.append(self._no_ts)
        return prompt

    def _text(self, result: ctranslate2.models.WhisperGenerationResult) -> tuple[str, int]:
        if result.no_speech_prob > _NO_SPEECH:
            return "", 0
        ids = result.sequences_ids[0]
        # CTranslate2's score is the sequence's log-probability over its length (length_penalty 1).
        sure = confidence(result.scores[0], result.no_speech_prob) if ids and result.scores else None
        return Transcript(str(self._tokenizer.decode(ids)).strip(), sure), len(ids)

    def _generate(
        self, encoded: ctranslate2.StorageView, language: str, repetition_penalty: float, seconds: float, prefix: list[int]
    ) -> tuple[str, int]:
        prompt = self._decoder_prompt(prefix, language)
        (result,) = self._model.model.generate(
            encoded,
            [prompt],
            beam_size=self._beam_size,
            max_length=_max_length(min(_MAX_NEW_TOKENS, max_tokens(seconds)), len(prompt)),
            return_no_speech_prob=True,
            return_scores=True,
            suppress_blank=True,
            repetition_penalty=repetition_penalty,
        )
        return self._text(result)

    def transcribe_batch(self, requests: Sequence[SttRequest]) -> list[str]:
        """Each request's :meth:`transcribe`, several at once where CTranslate2 can.

        Clips on the short-window path whose text prompts have the same length (CTranslate2's
        Whisper needs ``<|startoftranscript|>`` at one position across a batch) and whose windows
        are the same (no clip is padded with more silence than it would be alone) are encoded
        and decoded as one batch (on the spoken fixtures the transcripts were the same as one by
        one; docs/decisions/whisper-batch.md).
        A clip the loop guard judges looping in the batch is decoded again alone, through
        :meth:`transcribe` and its retry.  The rest (the 30 s path, a prompt length no other clip
        shares) are decoded one by one."""
        out: dict[int, str] = {}
        groups: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}  # (prompt length, window) -> clips
        for i, req in enumerate(requests):
            frames = window_frames(len(req.audio), self._window_s)
            if frames >= 3000:
                out[i] = self.transcribe(req.audio, req.language, req.prompt)
                continue
            prefix = self._prompt_tokens(req.prompt)
            groups.setdefault((len(prefix), frames), []).append((i, prefix))
        for (_, frames), group in groups.items():
            if len(group) == 1:
                i = group[0][0]
                out[i] = self.transcribe(requests[i].audio, requests[i].language, requests[i].prompt)
                continue
            encoded = self._encode_many([requests[i].audio for i, _ in group], frames)
            prompts = [self._decoder_prompt(prefix, requests[i].language) for i, prefix in group]
            seconds = [len(requests[i].audio) / _RATE for i, _ in group]
            new_tokens = max(min(_MAX_NEW_TOKENS, max_tokens(s)) for s in seconds)
            results = self._model.model.generate(
                encoded,
                prompts,
                beam_size=self._beam_size,
                max_length=_max_length(new_tokens, len(prompts[0])),
                return_no_speech_prob=True,
                return_scores=True,
                suppress_blank=True,
            )
            for (i, _), secs, result in zip(group, seconds, results, strict=True):
                text, tokens = self._text(result)
                if check(text, secs, tokens).looped:
                    text = self.transcribe(requests[i].audio, requests[i].language, requests[i].prompt)
                elif requests[i].prompt.strip() and echoes_prompt(text, requests[i].prompt):
                    self.echoes += 1
                    text = self.transcribe(requests[i].audio, requests[i].language, "")
                out[i] = text
        return [out[i] for i in range(len(requests))]
