"""What this server does with each part of GPT-Live (OpenAI's ``/v1/live/sessions`` API): the one table.

Every client event, server event and session field the installed ``openai`` package declares
under ``openai.types.live`` has one row: ``supported``, ``partial`` (the note says what is
missing) or ``refused`` (a client event or a field given a value: an ``error`` event, nothing
changed; a server event: never sent).  docs/live.md holds the table :func:`markdown` renders
(tests/unit/test_live_support.py checks it is the same, that the rows cover every name the
package declares, and that the decoder and the codec do what the rows say).

Pure data: no I/O.
"""

from __future__ import annotations

from voiceagent.transports.realtime_support import Status, Support, table_lines

__all__ = ["CLIENT_EVENTS", "CONTAINERS", "SERVER_EVENTS", "SESSION_FIELDS", "markdown"]

S, P, R = Status.SUPPORTED, Status.PARTIAL, Status.REFUSED

_DECISIONS = "Decisions (a model choosing among options on triggers) is not implemented"
_RESPONSES = "Responses delegation is not implemented yet: use client delegation (the default)"

CLIENT_EVENTS: tuple[Support, ...] = (
    Support("session.start", P, "field by field: see the session fields below; once, before anything else"),
    Support("session.update", P, "`delegation.acknowledgement_delay_ms`; the delegation's type cannot change (as OpenAI)"),
    Support("session.input_audio.append", S, "in the session's format; faster than real time past `server.audio_burst_s` is refused"),
    Support("session.input_audio.mute", S, "the model hears silence in its place (the timeline goes on)"),
    Support("session.input_audio.unmute", S),
    Support("session.output_audio.fixture.play", R, "audio fixtures are not implemented"),
    Support("session.instructions.append", S, "added to the instructions of every later turn; 500 tokens at most"),
    Support("session.thinking.append", S, "silent context for later turns; cancels pending acknowledgements"),
    Support(
        "session.commentary.append",
        S,
        "spoken: with a `delegation_id`, the delegation's result; with null, context the agent tells the user. "
        "Waits for the reply being spoken to end",
    ),
    Support("decision.create", R, _DECISIONS),
    Support("decision.item.create", R, _DECISIONS),
    Support("decision.item.delete", R, _DECISIONS),
    Support("response.item.create", R, _RESPONSES),
    Support("response.create", R, _RESPONSES),
    Support("session.close", S, "`session.closed` (`close_requested`, the final session and usage), then close code 1000"),
    Support("transport.dtmf.send", S, "SIP calls only (a sideband's command): the gateway presses the key as an RFC 4733 event"),
)
"""Every client event.  Any other type is ``unknown_event_type``."""

SERVER_EVENTS: tuple[Support, ...] = (
    Support("session.started", S, "the resolved session: server defaults filled in"),
    Support("session.updated", S),
    Support("session.input_audio.muted", S),
    Support("session.input_audio.unmuted", S),
    Support("session.output_audio.fixture.playing", R, "audio fixtures are not implemented"),
    Support("session.output_audio.fixture.played", R, "audio fixtures are not implemented"),
    Support("session.instructions.appended", S),
    Support("session.thinking.appended", S),
    Support("session.commentary.appended", S),
    Support("session.input_audio.append", S, "to sidebands: the caller's audio before muting, PCM16 at 24 kHz"),
    Support("session.output_audio.delta", S, "in the session's format; to sidebands PCM16 at 24 kHz with `start_ms`/`end_ms`"),
    Support(
        "session.input_transcript.delta",
        P,
        "one delta per user turn, its final transcript (partial hypotheses can be revised; deltas cannot retract)",
    ),
    Support("session.output_transcript.delta", S, "a clause at a time, with its place on the session's timeline"),
    Support("session.delegation.created", S, "`target: client`: the agent handed the user's request to the application"),
    Support("decision.event", R, _DECISIONS),
    Support("decision.item.created", R, _DECISIONS),
    Support("decision.item.deleted", R, _DECISIONS),
    Support("response.event", R, _RESPONSES),
    Support("session.usage.updated", S, "the session's seconds, once a minute"),
    Support("session.closed", S, "`close_requested`, `expired` or `connection_lost`"),
    Support("error", S, "a stable `code`, the offending `param`, the client's `event_id` as `client_event_id`"),
    Support("info", R, "nothing to tell yet: frontend data-channel permissions are not implemented"),
    Support("transport.dtmf.received", S, "to sidebands: each key the caller presses on a SIP call"),
    Support("transport.dtmf.send", R, "the legacy notification: `transport.dtmf.sent` confirms a key instead"),
    Support("transport.dtmf.sent", S, "to sidebands, once the SIP gateway was told to press the key"),
    Support("transport.ringing", S, "to sidebands of a session placed over SIP (`transport: {type: sip, to}`) while the phone rings"),
    Support("transport.answered", S, "to sidebands of a session placed over SIP, when the phone answers (before `session.started`)"),
    Support("transport.failed", S, "to sidebands of a session placed over SIP that was not answered (`busy`, `no_answer`, …); then closed"),
)
"""Every server event the package declares."""

SESSION_FIELDS: tuple[Support, ...] = (
    Support("model", S, "required; any name (this server runs its own models) and echoed back"),
    Support(
        "audio.format",
        S,
        "WebSocket: `audio/pcm` at 16000 or 24000 Hz (24000 when omitted), `audio/pcmu`, `audio/pcma` at 8000 Hz; "
        "WebRTC: refused (the tracks negotiate)",
    ),
    Support(
        "audio.output.voice",
        P,
        "a voice of the server's table, or an OpenAI name (`marin` when omitted) spoken by one; custom voice ids only as table names",
    ),
    Support("client", R, "frontend data-channel permissions are not implemented: every WebRTC client may send every client event"),
    Support(
        "delegation",
        P,
        "`client` (the default; `acknowledgement_delay_ms`, 0 when omitted); `responses` and `decisions` are refused",
    ),
    Support("input", S, "developer messages join the instructions; user and assistant messages the history; 128 at most"),
    Support("instructions", S, "blank or omitted: the server's; immutable after start"),
    Support("safety_identifier", S, "logged with the session; nothing else reads it"),
    Support("store", P, "`false` only: this server keeps no sessions"),
    Support("triggers", R, _DECISIONS),
)
"""Every field of ``session.start``'s ``session``, dotted through ``audio`` and ``audio.output``."""

CONTAINERS = frozenset({"audio", "audio.output"})
"""The session's nested objects whose fields have rows of their own."""


def markdown() -> str:
    """The three tables as docs/live.md shows them."""
    parts = [
        table_lines("client event", CLIENT_EVENTS),
        table_lines("server event", SERVER_EVENTS),
        table_lines("`session` field (`session.start`)", SESSION_FIELDS),
    ]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"
