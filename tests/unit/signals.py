"""Test signals: a sine tone and the frequency at its spectral peak."""

from __future__ import annotations

import numpy as np

from voiceagent.audio import Int16Array


def sine(freq: float, rate: int, seconds: float, amplitude: int = 10000) -> Int16Array:
    t = np.arange(round(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * amplitude).astype(np.int16)


def peak_hz(pcm: Int16Array, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64) * np.hanning(len(pcm))))
    return float(np.fft.rfftfreq(len(pcm), 1 / rate)[int(np.argmax(spectrum))])
