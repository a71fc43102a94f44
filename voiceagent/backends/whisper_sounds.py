"""A second reading of a short clip, in backchannels and sounds only: how much worse does it explain the clip?

Whisper tiny writes many sounds as words ("Mm-hmm, sure." as "and mamam", a laugh-hum as "I
can make a name.", a sigh as "But") and sure enough of them that a confidence threshold cannot
tell them from real short words.  What tells them apart is the question a person asks: *could
this also have been a "mm" or a "yeah"?*  So the clip is read twice on one encoder pass:

* the **free reading**: the transcript being judged (Whisper's greedy decode, as the loop guard
  left it);
* the **sound reading**: a beam search in which every text token is suppressed except those that
  spell the backchannel phrases and the sound spellings
  (:data:`~voiceagent.text.backchannel.SOUND_SPELLINGS`) with their punctuation.

Both are then scored under the *unconstrained* model, their end of text included (CTranslate2's
Whisper ``generate`` returns every step's log-probabilities with ``return_logits_vocab``, the
forced prefix's steps among them), so a reading that stops early or loops pays for it.  The
**margin** is the sound reading's log-likelihood minus the free reading's (nats, at most about
0): near 0, the clip is as much a "mm" as the words; a real request mostly reads 5-55 nats worse
in backchannels (docs/decisions/interruptions.md has the figures).

Pure functions of a loaded model; the caller confines them to the STT executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import ctranslate2
import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

Float64Array = npt.NDArray[np.float64]

__all__ = ["SOUND_BEAM", "SoundReading", "forced_logprobs", "read_as_sounds", "sound_suppression"]

SOUND_BEAM = 4
"""Beam width of the sound reading; its hypotheses are all scored and the best kept."""
_PUNCTUATION = (".", ",", "!", "?", "...", "-", " -")
_EXTRA_TOKENS = 8
"""The sound reading may run this many tokens past the free reading's length."""


@dataclass(frozen=True)
class SoundReading:
    """A clip's best reading in backchannels and sounds only (see the module docstring)."""

    sounds: str
    margin: float
    """Log-likelihood of ``sounds`` minus that of the transcript under the free model (nats)."""


def sound_suppression(tokenizer: Tokenizer, phrases: Iterable[str], eot: int) -> list[int]:
    """The text tokens (ids below ``eot``) that spell none of ``phrases`` (in lower case,
    capitalised or upper case, with or without a leading space) nor punctuation: the
    ``suppress_tokens`` of the sound reading."""
    encode = tokenizer.encode
    allowed: set[int] = set()
    for phrase in phrases:
        for variant in {phrase, phrase.capitalize(), phrase.upper()}:
            for form in (variant, " " + variant):
                allowed.update(encode(form, add_special_tokens=False).ids)
    for mark in _PUNCTUATION:
        allowed.update(encode(mark, add_special_tokens=False).ids)
    return [i for i in range(eot) if i not in allowed]


def _log_softmax(logits: object) -> Float64Array:
    x: Float64Array = np.asarray(logits, dtype=np.float64)
    shifted: Float64Array = x - x.max()
    return shifted - float(np.log(np.exp(shifted).sum()))


def forced_logprobs(
    model: ctranslate2.models.Whisper,
    batch: ctranslate2.StorageView,
    prompt: list[int],
    texts: Sequence[Sequence[int]],
    eot: int,
) -> list[float]:
    """The log-probability of each of ``texts`` (token ids) followed by the end of text, read
    after ``prompt`` (``<|startoftranscript|>`` ... ``<|notimestamps|>``) from ``batch`` (one
    clip's encoding, once per text), every token allowed; one batched decode.  ``generate`` decodes the text after
    ``<|notimestamps|>`` as a forced prefix and returns each step's logits, those steps included;
    it decodes at most ``max_length // 2`` steps here, so ``2 × (longest + 1)`` gives each text
    its own steps and one more for the end of text."""
    results = model.generate(
        batch,
        [prompt + list(ids) for ids in texts],
        beam_size=1,
        max_length=2 * (max(len(ids) for ids in texts) + 1),
        return_logits_vocab=True,
        suppress_blank=False,
        suppress_tokens=[],
    )
    out: list[float] = []
    for ids, result in zip(texts, results, strict=True):
        steps = result.logits[0]
        total = sum(float(_log_softmax(steps[k])[t]) for k, t in enumerate(ids))
        out.append(total + float(_log_softmax(steps[len(ids)])[eot]))
    return out


def read_as_sounds(
    model: ctranslate2.models.Whisper,
    decode: Callable[[list[int]], str],
    encoded: ctranslate2.StorageView,
    repeat: Callable[[int], ctranslate2.StorageView],
    prompt: list[int],
    suppress: list[int],
    eot: int,
    free_ids: Sequence[int],
) -> SoundReading:
    """The sound reading of one encoded clip against its transcript ``free_ids`` (the free
    reading), and their margin (see the module docstring).  ``decode``: the tokenizer's
    ``decode`` (ids → text); ``repeat(n)``: the clip's encoding ``n`` times over, as one batch."""
    (sounds,) = model.generate(
        encoded,
        [prompt],
        beam_size=SOUND_BEAM,
        num_hypotheses=SOUND_BEAM,
        max_length=2 * (len(free_ids) + _EXTRA_TOKENS) + len(prompt),
        suppress_tokens=suppress,
        no_repeat_ngram_size=3,  # a constrained beam otherwise loops on "-..." for want of better
    )
    readings = [list(free_ids), *(list(ids) for ids in sounds.sequences_ids)]
    free_lp, *sound_lps = forced_logprobs(model, repeat(len(readings)), prompt, readings, eot)
    best = max(range(len(sound_lps)), key=sound_lps.__getitem__)
    return SoundReading(sounds=decode(readings[best + 1]).strip(), margin=sound_lps[best] - free_lp)
