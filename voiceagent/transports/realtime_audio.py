"""The audio of one Realtime connection: its formats and the conversions between wire and session.

In: ``audio/pcm`` (24 kHz), ``audio/pcmu`` (8 kHz μ-law) or ``audio/pcma`` (8 kHz A-law) to the
session's 16 kHz.  Out: the
voice's rate to the output format, through one soxr stream per response (so no click between
chunks), opened when the response starts and closed when it ends.  Pure: no I/O.
"""

from __future__ import annotations

from voiceagent.audio import (
    PIPELINE_RATE,
    Int16Array,
    StreamResampler,
    alaw_decode,
    alaw_encode,
    mulaw_decode,
    mulaw_encode,
    pcm16_from_bytes,
)
from voiceagent.transports.realtime_wire import FORMATS

__all__ = ["WireAudio"]


class WireAudio:
    """Formats (``input_format``, ``output_format``: keys of :data:`FORMATS`) and resamplers."""

    def __init__(self, voice_rate: int, pcm_rate: int = FORMATS["audio/pcm"]) -> None:
        self.voice_rate = voice_rate
        self.pcm_rate = pcm_rate
        """The rate of ``audio/pcm`` (Realtime's is 24 kHz; GPT-Live's may be 16 kHz)."""
        self.input_format = "audio/pcm"
        self.output_format = "audio/pcm"
        self.fixed = False
        """True where the audio does not travel as events (a WebRTC call's tracks): the formats a
        client names are then left as they are (``audio/pcm``)."""
        self._in = StreamResampler(self.rate(self.input_format), PIPELINE_RATE, quality="LQ")
        self._out: dict[str, StreamResampler | None] = {}  # None: opened, no audio yet

    def rate(self, kind: str) -> int:
        """The sample rate of format ``kind``."""
        return self.pcm_rate if kind == "audio/pcm" else FORMATS[kind]

    def set_input_format(self, kind: str) -> None:
        if kind != self.input_format:
            self.input_format = kind
            self._in = StreamResampler(self.rate(kind), PIPELINE_RATE, quality="LQ")

    def to_session(self, raw: bytes) -> Int16Array:
        """Input bytes in the input format (a whole number of samples) → 16 kHz samples."""
        if self.input_format == "audio/pcmu":
            pcm = mulaw_decode(raw)
        elif self.input_format == "audio/pcma":
            pcm = alaw_decode(raw)
        else:
            pcm = pcm16_from_bytes(raw)
        return self._in.process(pcm)

    def open(self, response_id: str) -> None:
        """Response ``response_id`` starts speaking."""
        self._out[response_id] = None

    def out(self, response_id: str, pcm: Int16Array, rate: int | None = None) -> bytes:
        """Voice samples of a response at ``rate`` (None: ``voice_rate``; each session's voice
        has its own) → output bytes (b'' while the resampler fills)."""
        if response_id not in self._out:
            return self._bytes(pcm)
        rs = self._out[response_id]
        if rs is None:
            rs = self._out[response_id] = StreamResampler(rate or self.voice_rate, self.rate(self.output_format))
        return self._bytes(rs.process(pcm))

    def close(self, response_id: str, *, flush: bool) -> bytes:
        """The response ended; with ``flush`` its resampler's tail, else nothing."""
        rs = self._out.pop(response_id, None)
        return self._bytes(rs.flush()) if rs is not None and flush else b""

    def open_responses(self) -> set[str]:
        """Responses whose output stream is open (for tests and diagnostics)."""
        return set(self._out)

    def _bytes(self, pcm: Int16Array) -> bytes:
        if len(pcm) == 0:
            return b""
        if self.output_format == "audio/pcmu":
            return mulaw_encode(pcm)
        if self.output_format == "audio/pcma":
            return alaw_encode(pcm)
        return pcm.astype("<i2").tobytes()
