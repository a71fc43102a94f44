"""Echo cancellation for ``voiceagent talk`` on speakers: the agent never hears itself.

The talk knows exactly what its speaker played, so :func:`cancel_echo` puts a
:class:`~voiceagent.echo.EchoCanceller` (WebRTC's AEC3; the contract of its two streams is in
:mod:`voiceagent.echo`) between the speaker, whose ``monitors`` feed it the reference, and the
microphone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from voiceagent.audio import Int16Array
from voiceagent.echo import EchoCanceller
from voiceagent.talk.devices import Microphone, Speaker

__all__ = ["EchoCancelledMicrophone", "cancel_echo"]


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
