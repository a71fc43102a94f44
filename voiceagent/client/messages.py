"""Client → server: the messages a Realtime client sends, as JSON-ready dicts.

Pure: each function returns one message with a fresh ``event_id`` (the server names it in the
``error`` a bad message gets back); the caller serialises it (``json.dumps``) and sends it on the
socket it owns.  Shapes and the wire's audio encoding come from
:mod:`voiceagent.transports.realtime_wire`, the definition the server's codec uses too.
"""

from __future__ import annotations

from typing import Any

from voiceagent.audio import Int16Array
from voiceagent.transports.realtime_wire import b64_pcm16, format_object, message

__all__ = [
    "append_audio",
    "cancel_response",
    "clear_input",
    "commit_input",
    "create_response",
    "create_text",
    "session_update",
    "tool_output",
    "truncate",
]


def session_update(*, input_format: str | None = "audio/pcm", output_format: str | None = "audio/pcm", **session: Any) -> dict[str, Any]:
    """``session.update`` setting the audio formats (None: that side left as it is) and any other
    ``session`` fields given (``instructions``, ``tools``, ``tool_choice``, ``max_output_tokens``,
    ``output_modalities``…)."""
    audio: dict[str, Any] = {}
    if input_format is not None:
        audio["input"] = {"format": format_object(input_format)}
    if output_format is not None:
        audio["output"] = {"format": format_object(output_format)}
    return message("session.update", session={"type": "realtime", **({"audio": audio} if audio else {}), **session})


def append_audio(pcm: Int16Array) -> dict[str, Any]:
    """``input_audio_buffer.append`` of 24 kHz 16-bit samples (``audio/pcm``)."""
    return message("input_audio_buffer.append", audio=b64_pcm16(pcm))


def commit_input() -> dict[str, Any]:
    """``input_audio_buffer.commit``: the audio appended since the last commit is one user turn
    (for a session with ``turn_detection: null``)."""
    return message("input_audio_buffer.commit")


def clear_input() -> dict[str, Any]:
    """``input_audio_buffer.clear``: drop the appended audio not yet committed."""
    return message("input_audio_buffer.clear")


def create_text(text: str, *, role: str = "user", previous_item_id: str | None = None) -> dict[str, Any]:
    """``conversation.item.create`` of a text message (``input_text`` for the user, ``output_text``
    for the assistant), after ``previous_item_id`` when given (else at the end)."""
    part = {"type": "input_text" if role != "assistant" else "output_text", "text": text}
    item = {"type": "message", "role": role, "content": [part]}
    extra = {"previous_item_id": previous_item_id} if previous_item_id is not None else {}
    return message("conversation.item.create", item=item, **extra)


def tool_output(call_id: str, output: str) -> dict[str, Any]:
    """``conversation.item.create`` of the ``function_call_output`` item for call ``call_id``."""
    return message("conversation.item.create", item={"type": "function_call_output", "call_id": call_id, "output": output})


def create_response(**response: Any) -> dict[str, Any]:
    """``response.create``, with a ``response`` object when fields are given
    (``output_modalities=["text"]``, ``instructions``…)."""
    return message("response.create", response=response) if response else message("response.create")


def cancel_response(response_id: str | None = None) -> dict[str, Any]:
    """``response.cancel`` of ``response_id`` (None: whichever response is in progress)."""
    return message("response.cancel", response_id=response_id) if response_id is not None else message("response.cancel")


def truncate(item_id: str, audio_end_ms: float, content_index: int = 0) -> dict[str, Any]:
    """``conversation.item.truncate``: the listener heard ``audio_end_ms`` of item ``item_id``
    (whole milliseconds, rounded down)."""
    return message("conversation.item.truncate", item_id=item_id, content_index=content_index, audio_end_ms=int(audio_end_ms))
