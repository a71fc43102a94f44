"""Echo cancellation for ``voiceagent talk`` on speakers: the agent never hears itself.

On a laptop with no headphones the microphone hears the speaker.  Without cancellation the
agent's own voice reaches the VAD as speech over the reply: the reply pauses, its words are
transcribed, and the agent interrupts itself (or, after the reply, answers itself).  The talk
knows exactly what it played, so it subtracts that from what it hears, as a phone's speakerphone
does: WebRTC's audio processing module (AEC3, with its own delay estimation), as the ``livekit``
wheel ships it (Apache-2.0; the native library is inside the wheel, nothing is downloaded).

:class:`EchoCanceller` is the module between the two ends:

* :meth:`~EchoCanceller.played` takes every block the output device plays, silence included, in
  order and from any one thread (a sound card's callback thread): the *reference*;
* :meth:`~EchoCanceller.heard` takes each microphone block (mono int16 at 16 kHz) and returns it
  with the echo removed.  Call it from one thread.

The two streams are kept in step by their frame counts, not by when they are handled: both are a
device's continuous stream on one clock, so the microphone's k-th frame was heard while the
reference's k-th frame (counted from the first microphone frame) played.  Before each microphone
frame the module gets the reference up to and including that frame, never more.  Handing it all the reference
queued so far instead broke the cancellation when the microphone's blocks were read late and in
a burst (a busy event loop): a second of them read at once, after a second of reference, left the
echo whole (0.4 dB removed against 25 dB), as the module saw the reference a second early.

Audio goes through in 10 ms frames (the module's unit); a block that is not a whole number of
frames keeps its remainder for the next call, so :meth:`~EchoCanceller.heard` may return up to
10 ms less or more than it was given.  The cost is about 0.15 ms of CPU per 10 ms of audio (7.2 s
of a story through an echo path in 0.10 s here), the order of the microphone's resampling that
runs beside it, so it runs in line on the caller's thread.

:func:`cancel_echo` puts one between a talk's speaker (whose ``monitors`` feed it the
reference) and its microphone.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.denoise import FRAME, Frames, apm_frame, livekit_rtc
from voiceagent.talk.devices import Microphone, Speaker

__all__ = ["FRAME", "EchoCanceller", "EchoCancelledMicrophone", "cancel_echo"]

_MAX_QUEUED = 100 * 5
"""Reference frames held at most (5 s): a microphone that stopped being read must not let the
queue grow without bound; the oldest go first, as they would be stale anyway."""


class EchoCanceller:
    """See the module docstring.  ``noise_suppression``: also WebRTC's noise suppressor (off: it
    wins only in loud steady noise, docs/decisions/noise-suppression.md)."""

    def __init__(self, *, noise_suppression: bool = False) -> None:
        rtc = livekit_rtc()
        self._frame_type = rtc.AudioFrame
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, noise_suppression=noise_suppression, high_pass_filter=True)
        self._lock = threading.Lock()
        self._reference: deque[Int16Array] = deque(maxlen=_MAX_QUEUED)
        self._ref_frames = Frames()
        self._ref_resampler: StreamResampler | None = None
        self._mic_frames = Frames()
        self._heard_frames = 0  # microphone frames processed
        self._next = 0  # the index of the reference queue's first frame (0: the oldest queued at the first microphone frame)
        self._lead: int | None = None  # reference frames played before the first microphone frame
        self.dropped_reference = 0
        """Reference frames dropped because nothing read the microphone for 5 s."""

    def played(self, pcm: Int16Array, rate: int) -> None:
        """``pcm`` (mono int16 at ``rate``) has just gone to the output device."""
        if rate != PIPELINE_RATE:
            if self._ref_resampler is None or self._ref_resampler.src_rate != rate:
                self._ref_resampler = StreamResampler(rate, PIPELINE_RATE)
            pcm = self._ref_resampler.process(pcm)
        buf = self._ref_frames.whole(pcm)
        frames = [buf[i : i + FRAME].copy() for i in range(0, len(buf), FRAME)]
        with self._lock:
            full = len(self._reference) + len(frames) - _MAX_QUEUED
            if full > 0:
                self.dropped_reference += full
                if self._lead is not None:
                    self._next += min(full, len(self._reference))  # the oldest go: the queue starts later
            self._reference.extend(frames)

    def heard(self, pcm: Int16Array) -> Int16Array:
        """``pcm`` (mono int16 at 16 kHz) as the microphone heard it → the same without the echo
        (whole 10 ms frames; see the module docstring)."""
        buf = self._mic_frames.whole(pcm)
        out = np.empty(len(buf), dtype=np.int16)
        for i in range(0, len(buf), FRAME):
            self._feed_reference()
            self._heard_frames += 1
            frame = apm_frame(self._frame_type, buf[i : i + FRAME])
            self._apm.set_stream_delay_ms(0)  # AEC3 estimates the delay itself
            self._apm.process_stream(frame)
            out[i : i + FRAME] = np.frombuffer(frame.data, dtype=np.int16)
        return out

    def _feed_reference(self) -> None:
        """Hand the module the reference up to and including the frame that played while the
        microphone frame about to be processed was heard (the module docstring): for the first,
        all that played before it and one more; then one frame per frame."""
        with self._lock:
            if self._lead is None:
                self._lead = len(self._reference)
                self._next = 0
            due = self._lead + self._heard_frames + 1 - self._next
            frames = [self._reference.popleft() for _ in range(min(max(due, 0), len(self._reference)))]
            self._next += len(frames)
        for frame in frames:
            self._apm.process_reverse_stream(apm_frame(self._frame_type, frame))


class EchoCancelledMicrophone:
    """A :class:`~voiceagent.talk.devices.Microphone` whose frames have ``canceller``'s echo
    removed.  Cancellation: propagates from the wrapped microphone's ``frames()``."""

    def __init__(self, mic: Microphone, canceller: EchoCanceller) -> None:
        self._mic = mic
        self.canceller = canceller

    @property
    def exhausted(self) -> bool:
        return self._mic.exhausted

    async def frames(self) -> AsyncIterator[Int16Array]:
        async for pcm in self._mic.frames():
            clean = self.canceller.heard(pcm)
            if len(clean):
                yield clean


def cancel_echo(mic: Microphone, speaker: Speaker, *, noise_suppression: bool = False) -> EchoCancelledMicrophone:
    """``mic`` with ``speaker``'s echo removed: a new :class:`EchoCanceller` told every block the
    speaker plays.  Raises :class:`~voiceagent.errors.MissingDependencyError` without ``livekit``."""
    canceller = EchoCanceller(noise_suppression=noise_suppression)
    speaker.monitors.append(canceller.played)
    return EchoCancelledMicrophone(mic, canceller)
