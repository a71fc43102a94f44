"""Echo cancellation: the agent never hears itself where its own voice comes back to it.

On a laptop with no headphones the microphone hears the speaker; on a speakerphone call the
caller's microphone sends the agent's voice back down the line.  Without cancellation the
agent's own voice reaches the VAD as speech over the reply: the reply pauses, its words are
transcribed, and the agent interrupts itself (or, after the reply, answers itself).  Where the
audio leaves, what was played is known exactly, so it is subtracted from what comes back, as a
phone's speakerphone does: WebRTC's audio processing module (AEC3, with its own delay
estimation), as the ``livekit`` wheel ships it (Apache-2.0; the native library is inside the
wheel, nothing is downloaded).

:class:`EchoCanceller` is the module between the two ends:

* :meth:`~EchoCanceller.played` takes every block the output plays, silence included, in order
  and from any one thread (a sound card's callback thread, PJSIP's clock thread): the
  *reference*;
* :meth:`~EchoCanceller.heard` takes each input block (mono int16 at 16 kHz) and returns it
  with the echo removed.  Call it from one thread.

The two streams are kept in step by their frame counts, not by when they are handled: both are a
device's continuous stream on one clock (a sound card's, a call's media clock), so the input's
k-th frame was heard while the reference's k-th frame (counted from the first input frame)
played.  Before each input frame the module gets the reference up to and including that frame,
never more.  Handing it all the reference queued so far instead broke the cancellation when the
input's blocks were read late and in a burst (a busy event loop): a second of them read at
once, after a second of reference, left the echo whole (0.4 dB removed against 25 dB), as the
module saw the reference a second early.

Audio goes through in 10 ms frames (the module's unit); a block that is not a whole number of
frames keeps its remainder for the next call, so :meth:`~EchoCanceller.heard` may return up to
10 ms less or more than it was given.  The cost is about 0.15 ms of CPU per 10 ms of audio (7.2 s
of a story through an echo path in 0.10 s here), the order of the input's resampling that runs
beside it, so it runs in line on the caller's thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.denoise import FRAME, Frames, apm_frame, livekit_rtc, suppressor_installed

__all__ = ["FRAME", "EchoCanceller", "LineJudge", "echo_cancellation_on"]

log = logging.getLogger(__name__)


def echo_cancellation_on(setting: str) -> bool:
    """Whether ``phone.echo_cancellation`` (``auto``, ``on`` or ``off``) cancels here: ``auto``
    where the canceller's library (``livekit``) is installed.  ``on`` without it is refused at
    start-up, before this is asked."""
    return setting == "on" or (setting == "auto" and suppressor_installed())


_MAX_QUEUED = 100 * 5
"""Reference frames held at most (5 s): a microphone that stopped being read must not let the
queue grow without bound; the oldest go first, as they would be stale anyway."""


_BLOCK_FRAMES = 20
"""A line is judged in blocks of 200 ms (10 ms frames)."""
_LAG_FRAMES = 50
"""How late an echo may come back: 500 ms (a phone's buffers and the network's, both ways)."""
_FAR_ACTIVE_RMS = 300.0
"""A block whose reference is louder than this (about -40 dBFS) is the agent talking: only those
blocks tell whether anything comes back."""
_QUIET_FLOOR_RMS = 30.0
"""An input block under this (about -60 dBFS) carried nothing back."""
_ECHO_NCC = 0.3
_CLEAR_NCC = 0.2
"""Peak normalised cross-correlation of an input block with the reference, over the lags an echo
may come back at: an echo's is 0.5-0.85 (0.35 and up with the caller talking over it), a caller's
words over the agent 0-0.27 (docs/telephony.md).  Blocks in between count for neither."""
_ECHO_BLOCKS = 3
_CLEAR_BLOCKS = 5


class LineJudge:
    """Whether a phone line returns the agent's voice, judged by what comes back while the agent
    talks: an input block that correlates with what played up to :data:`_LAG_FRAMES` before it is
    an echo; one that is quiet, or loud but unlike it (the caller's "yeah" over the agent), is not.
    :meth:`frame` takes each 10 ms input frame with the reference frame that played while it was
    heard, and gives the verdict once there is one: ``"echo"`` after :data:`_ECHO_BLOCKS` echoing
    blocks, ``"none"`` after :data:`_CLEAR_BLOCKS` clear ones (two more for each echoing one).
    Loudness alone could not tell the two apart: a caller's words over the agent's first second
    made lines with no echo ``"echo"`` and their early interruptions came through damped."""

    def __init__(self) -> None:
        self._ref: deque[Int16Array] = deque(maxlen=_LAG_FRAMES + _BLOCK_FRAMES)
        self._mic: deque[Int16Array] = deque(maxlen=_BLOCK_FRAMES)
        self._frames = 0
        self.echo_blocks = 0
        self.clear_blocks = 0

    def frame(self, mic: Int16Array, ref: Int16Array | None) -> str | None:
        self._ref.append(ref if ref is not None else np.zeros(FRAME, dtype=np.int16))
        self._mic.append(mic)
        self._frames += 1
        if self._frames % _BLOCK_FRAMES or len(self._ref) < _LAG_FRAMES + _BLOCK_FRAMES:
            return None
        r = np.concatenate(self._ref).astype(np.float64)
        m = np.concatenate(self._mic).astype(np.float64)
        b = len(m)
        if np.sqrt(np.mean(r[-b:] ** 2)) < _FAR_ACTIVE_RMS:
            return None  # the agent is quiet: nothing to judge by
        if np.sqrt(np.mean(m**2)) < _QUIET_FLOOR_RMS:
            self.clear_blocks += 1
        else:
            ncc = _peak_correlation(m, r)
            self.echo_blocks += ncc >= _ECHO_NCC
            self.clear_blocks += ncc < _CLEAR_NCC
        if self.echo_blocks >= _ECHO_BLOCKS:
            return "echo"
        if self.clear_blocks >= _CLEAR_BLOCKS + 2 * self.echo_blocks:
            return "none"
        return None


def _peak_correlation(m: np.ndarray[Any, np.dtype[np.float64]], r: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """The peak of ``m``'s normalised cross-correlation with the windows of ``r`` it could echo
    (``r``'s last ``len(m)`` samples are simultaneous with ``m``; earlier ones came before)."""
    b, lags = len(m), len(r) - len(m)
    n = 1 << int(np.ceil(np.log2(len(r) + b)))
    c = np.fft.irfft(np.fft.rfft(r, n) * np.conj(np.fft.rfft(m, n)), n)[: lags + 1]  # c[k] = sum r[k + i] m[i]
    energy = np.concatenate([[0.0], np.cumsum(r**2)])
    windows = energy[b : b + lags + 1] - energy[: lags + 1]
    return float(np.max(np.abs(c) / np.sqrt(windows * np.sum(m**2) + 1e-9)))


class EchoCanceller:
    """See the module docstring.  ``noise_suppression``: also WebRTC's noise suppressor (off: it
    wins only in loud steady noise, docs/decisions/noise-suppression.md).

    ``line``: a phone line, which may return no echo at all (a handset, a phone with its own
    canceller).  AEC3 learns that only with time: in the first seconds of the agent's first reply
    it damps the caller's voice as if it were echo (a caller interrupting 2.5 s into it came
    through 8.6 dB down on average and up to 50 dB down in its first half second, and the
    interruption was missed).  So each line is judged by a :class:`LineJudge` while the agent
    talks: once it finds no echo (:attr:`verdict` ``"none"``, about a second of the agent
    talking), the input passes as it came and the module no longer runs; once it finds one
    (``"echo"``), the canceller stays.  Until the verdict the output is the canceller's (the agent
    must not hear itself meanwhile).  A line that starts to echo later in the call (a speakerphone
    switched on) is not judged again.  The verdict is logged once, under ``label`` (the call's name)."""

    def __init__(self, *, noise_suppression: bool = False, line: bool = False, label: str = "line") -> None:
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
        self.verdict: str | None = None if line else "echo"
        """``"echo"`` (cancelled), ``"none"`` (passed as it came) or None (a line still being
        judged): see the class docstring."""
        self._judge = LineJudge() if line else None
        self._label = label
        self._ref_now: Int16Array | None = None  # the reference frame that played while the input frame was heard

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
            raw = buf[i : i + FRAME]
            self._feed_reference(run=self.verdict != "none")
            self._heard_frames += 1
            if self.verdict == "none":
                out[i : i + FRAME] = raw
                continue
            frame = apm_frame(self._frame_type, raw)
            self._apm.set_stream_delay_ms(0)  # AEC3 estimates the delay itself
            self._apm.process_stream(frame)
            out[i : i + FRAME] = np.frombuffer(frame.data, dtype=np.int16)
            if self._judge is not None and self.verdict is None:
                self.verdict = self._judge.frame(raw, self._ref_now)
                if self.verdict is not None:
                    log.info("%s: %s", self._label, "echo on the line, cancelled" if self.verdict == "echo" else "no echo on the line")
        return out

    def _feed_reference(self, run: bool = True) -> None:
        """Hand the module the reference up to and including the frame that played while the
        microphone frame about to be processed was heard (the module docstring): for the first,
        all that played before it and one more; then one frame per frame.  ``run=False``: only
        take them off the queue (the module no longer runs)."""
        with self._lock:
            if self._lead is None:
                self._lead = len(self._reference)
                self._next = 0
            due = self._lead + self._heard_frames + 1 - self._next
            frames = [self._reference.popleft() for _ in range(min(max(due, 0), len(self._reference)))]
            self._next += len(frames)
        self._ref_now = frames[-1] if frames else None
        if run:
            for frame in frames:
                self._apm.process_reverse_stream(apm_frame(self._frame_type, frame))
