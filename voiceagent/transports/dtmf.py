"""Keypad tones in the audio (in-band DTMF, ITU-T Q.23), for a transport whose only way to the
far end is the call's audio: Twilio Media Streams has no message that presses a key, but a
G.711 call carries the tones as well as a handset's keypad makes them.  Pure functions."""

from __future__ import annotations

import numpy as np

from voiceagent.audio import Int16Array

__all__ = ["FREQUENCIES", "GAP_MS", "TONE_MS", "dtmf_tones"]

FREQUENCIES: dict[str, tuple[float, float]] = {
    key: (low, high)
    for low, row in zip((697.0, 770.0, 852.0, 941.0), ("123A", "456B", "789C", "*0#D"), strict=True)
    for high, key in zip((1209.0, 1336.0, 1477.0, 1633.0), row, strict=True)
}
"""Each key's (row, column) frequencies in Hz."""
TONE_MS = 100
"""Each key sounds this long: Q.24 receivers need 40 ms, IVRs commonly expect 65-100."""
GAP_MS = 100
"""Silence between keys, so a receiver hears two presses of one key as two."""
_AMPLITUDE = 0.25  # each of the two tones: about -9 dBFS together, clear of clipping after μ-law


def dtmf_tones(digits: str, rate: int) -> Int16Array:
    """The tones of ``digits`` (each of :data:`FREQUENCIES`' keys) at ``rate`` Hz, each followed
    by :data:`GAP_MS` of silence; raises ValueError on another character."""
    bad = [d for d in digits if d not in FREQUENCIES]
    if bad:
        raise ValueError(f"not keypad keys: {''.join(bad)!r}")
    t = np.arange(rate * TONE_MS // 1000) / rate
    gap = np.zeros(rate * GAP_MS // 1000)
    # A 5 ms ramp at each end: a tone switched on at full level clicks, and the click's spread
    # of frequencies can read as another key.
    ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.005)
    parts: list[np.ndarray[tuple[int], np.dtype[np.float64]]] = []
    for digit in digits:
        low, high = FREQUENCIES[digit]
        parts += [ramp * _AMPLITUDE * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)), gap]
    if not parts:
        return np.zeros(0, dtype=np.int16)
    return np.round(np.concatenate(parts) * 32767).astype(np.int16)
