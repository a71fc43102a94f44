"""Several sessions' final decodes as one Whisper batch, on the real packaged models.

``WhisperStt.transcribe_batch`` pads the clips of a batch to the longest one's window and decodes
them together; each transcript must be the one the clip gets alone, whichever clips share the
batch, including clips with a transcription prompt (clips whose prompts differ in length cannot
share a CTranslate2 batch, so they are grouped).  Through the :class:`Coalescer`, four finals submitted while
Whisper is busy become one batch, and each caller gets its own clip's words.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, make_fixtures
from tests.profile import profile_config
from voiceagent.audio import int16_to_float, read_wav, resample
from voiceagent.backends.protocols import SttRequest
from voiceagent.backends.whisper import WhisperStt
from voiceagent.pipeline.coalesce import Coalescer

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

# fixture -> a word its transcript holds (Whisper tiny and base both hear these).
CLIPS = {"long_question": "london", "colour": "sky", "weather": "moon", "count": "count"}


def _clips() -> dict[str, np.ndarray]:
    fixtures = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    out = {}
    for name in CLIPS:
        pcm, rate = read_wav(fixtures[name])
        out[name] = int16_to_float(resample(pcm, rate, 16000))
    return out


@pytest.fixture(scope="module", params=["whisper-tiny", "whisper-base"])
def whisper(request: pytest.FixtureRequest) -> Iterator[WhisperStt]:
    beam = 5 if request.param == "whisper-base" else 1  # as the profiles decode them
    backend = WhisperStt(request.param, profile_config().cache_path, threads=1, beam_size=beam)
    yield backend
    backend.executor.shutdown(wait=False)


def test_a_batch_writes_what_each_clip_gets_alone(whisper: WhisperStt) -> None:
    clips = _clips()
    # Two clips with no prompt and two with the same prompt: two batches, one of them prompted.
    prompts = ["", "Get the current weather in a city.", "", "Get the current weather in a city."]
    requests = [SttRequest(audio, "en", prompt) for audio, prompt in zip(clips.values(), prompts, strict=True)]
    alone = [whisper.transcribe(r.audio, r.language, r.prompt) for r in requests]
    batched = whisper.transcribe_batch(requests)
    assert batched == alone
    for text, word in zip(batched, CLIPS.values(), strict=True):
        assert word in text.lower(), (word, text)
    # The clips of different lengths in one batch, in another order: still each its own.
    reordered = [requests[i] for i in (3, 0, 2)]
    assert whisper.transcribe_batch(reordered) == [alone[i] for i in (3, 0, 2)]


def test_finals_queued_together_are_one_batch_and_each_caller_gets_its_own(whisper: WhisperStt, run: Callable[..., Any]) -> None:
    async def main() -> None:
        clips = _clips()
        finals = Coalescer(whisper.executor, whisper.transcribe_batch, max_batch=4)
        started, gate = threading.Event(), threading.Event()

        def hold() -> bool:
            started.set()
            return gate.wait(60)

        holder = whisper.executor.submit(hold)  # Whisper busy
        assert started.wait(60)
        tasks = [asyncio.create_task(finals.submit(0, SttRequest(audio, "en"))) for audio in clips.values()]
        await asyncio.sleep(0)  # one turn of the loop: each task puts its final in and awaits
        assert whisper.executor.depth == 1  # one drain queued behind the busy decoder, for all four
        gate.set()
        texts = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        holder.result(60)
        assert (finals.batches, finals.batched) == (1, 4)
        for text, word in zip(texts, CLIPS.values(), strict=True):
            assert word in text.lower(), (word, text)

    run(main())
