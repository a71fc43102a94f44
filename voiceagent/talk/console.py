"""The terminal side of ``voiceagent talk``: live transcripts of both speakers.

Final lines are always printed (``you: …``, ``agent: …``), so a pipe or a test sees the whole
conversation.  On a terminal, partial transcripts are shown as they change, on one line that is
rewritten in place.
"""

from __future__ import annotations

from typing import TextIO

__all__ = ["Console"]


class Console:
    def __init__(self, out: TextIO, *, live: bool | None = None) -> None:
        self.out = out
        self.live = out.isatty() if live is None else live
        self._partial = False

    def _line(self, text: str) -> None:
        if self._partial:
            self.out.write("\r\x1b[K")
            self._partial = False
        self.out.write(text + "\n")
        self.out.flush()

    def partial(self, who: str, text: str) -> None:
        """A transcript still being spoken (shown on a terminal only)."""
        if not self.live:
            return
        width = 100
        shown = text if len(text) <= width else "…" + text[-width:]
        self.out.write(f"\r\x1b[K{who}: {shown}")
        self.out.flush()
        self._partial = True

    def user(self, text: str) -> None:
        self._line(f"you: {text}" if text else "you: (nothing recognised)")

    def agent(self, text: str, *, status: str, heard_ms: float | None) -> None:
        if not text and status == "completed":
            return  # a reply that only called a tool: the tool lines said it
        note = ""
        if status == "cancelled":
            note = "  [interrupted]" if heard_ms is None else f"  [interrupted after {heard_ms / 1000:.1f} s]"
        elif status != "completed":
            note = f"  [{status}]"
        self._line(f"agent: {text or '…'}{note}")

    def latency(self, spans: dict[str, float]) -> None:
        """The server's per-turn timeline: ms from the end of the user's speech to each step."""
        first = spans.get("first_audio_sent")
        if first is None:
            return
        steps = (("transcript_final", "transcript"), ("llm_first_token", "LLM"), ("tts_first_audio", "TTS"))
        detail = ", ".join(f"{label} {spans[k]:.0f}" for k, label in steps if k in spans)
        self._line(f"       first audio {first:.0f} ms after you stopped ({detail})")

    def info(self, text: str) -> None:
        self._line(f"-- {text}")

    def tool(self, text: str) -> None:
        self._line(f"tool: {text}")

    def error(self, text: str) -> None:
        self._line(f"!! {text}")
