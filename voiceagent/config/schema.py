"""The configuration's schema: one frozen dataclass per section, each validated when built.

Unknown keys, wrong types and out-of-range values raise :class:`~voiceagent.errors.ConfigError`
with the dotted key in the message, before any model is loaded (:mod:`voiceagent.config.load`
builds them)."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from voiceagent.config.prompts import DEFAULT_INSTRUCTIONS, parse_examples
from voiceagent.errors import ConfigError

__all__ = [
    "DEVICES",
    "LLM_QUANTS",
    "OPENAI_VOICES",
    "SIP_CALLS_LIMIT",
    "SIP_WEBHOOK_EVENTS",
    "CacheConfig",
    "Config",
    "GpuConfig",
    "LlmConfig",
    "PhoneConfig",
    "PlayoutConfig",
    "ServerConfig",
    "SttConfig",
    "ToolsConfig",
    "TtsConfig",
    "TurnConfig",
    "VadConfig",
]

LLM_QUANTS = ("shipped", "iq4_nl", "q4_0")
"""``llm.quant``: the packaged GGUF as it is, or converted once to one of these llama.cpp types."""

_VOICE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")
"""The voice names of OpenAI's Realtime API: what a client written for it sends (the Agents SDK's
default is ``ash``).  Each speaks as a voice of this server's table (``tts.openai_voices``)."""


def _json_object(text: str) -> bool:
    if not text:
        return True
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


DEVICES = ("cpu", "cuda")


def _check(cond: bool, key: str, message: str) -> None:
    if not cond:
        raise ConfigError(f"invalid configuration: {key} {message}")


SIP_WEBHOOK_EVENTS = ("realtime.call.incoming", "live.transport.incoming")
"""The events that can announce a ringing SIP call (``server.sip_webhook_events``)."""

SIP_CALLS_LIMIT = 4
"""Calls the packaged PJSIP (``pjsua2-python`` 2.15.1) holds at once, whatever it is asked: its
``PJSUA_MAX_CALLS`` is 4, it caps ``uaConfig.maxCalls`` there without a word, and it answers the
fifth caller 486 itself (measured: a bare pjsua2 endpoint asked for 18 calls took 4 of 10
INVITEs; asked for 2, it took 2).  A PJSIP built with a larger ``PJSUA_MAX_CALLS`` needs this
raised too."""


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    max_message_bytes: int = 1 << 20
    """Largest WebSocket message accepted; a larger one closes the connection with code 1009."""
    max_sessions: int = 0
    """Sessions served at once, fixed by an operator (past it a connection gets HTTP 503), in place
    of admission by load.  0, the default: sessions are admitted by the measured load
    (``load_threshold``, :mod:`voiceagent.admission`)."""
    load_threshold: float = 0.75
    """A new session is admitted while the measured load (0–1: the larger of the process's CPU
    share of its cores and the recent turns' p95 latency over ``latency_budget_ms``) plus what the
    new session is expected to add stays under this; past it a connection gets HTTP 503 with
    ``Retry-After`` and ``/readyz`` answers 503 ``full``."""
    latency_budget_ms: int = 2500
    """The end-of-speech → first-audio p95 that admission protects: the load counts the recent
    turns' p95 against it, so new sessions are refused before the running ones' turns pass it."""
    agent_port: int = 0
    """A TCP port for HAProxy's ``agent-check`` (0: off): each connection gets one line, ``ready
    up NN%`` with the replica's weight (100 − load %) while it takes new sessions, ``drain``
    while it refuses them (full, or shutting down), then the connection closes."""
    turn_budget_ms: int = 1000
    """``profile = "auto"``: the end-of-speech → first-audio time one turn may take on this
    machine, predicted at start-up from the measured turn cost; the most accurate installed
    profile within it is chosen (:mod:`voiceagent.backends.auto_profile`)."""
    auto_remeasure: bool = False
    """``profile = "auto"``: measure every installed profile again at this start.  Otherwise a start
    on the same machine, package versions, candidates and budget as the last choice begins at that
    choice and loads none of the profiles it found too slow."""
    startup_lock_dir: str = ""
    """Where start-ups take turns (:func:`voiceagent.contention.startup_lock`): the processes
    sharing this directory load their models together but warm up and measure one at a time.
    "" is ``cache_dir``, which replicas on one machine share; containers that each have their own
    ``cache_dir`` (docker/compose.yaml) share a volume here instead."""
    public_url: str = ""
    """Public wss:// base URL used in the TwiML document (telephony); empty: derived from the request."""
    auth: str = "auto"
    """``auto``: a token is required unless ``host`` is a loopback address; ``on``; ``off`` (on a
    public address this logs a warning at start-up).  With auth on and no ``auth_tokens`` a token
    is generated at start-up and printed with how to connect."""
    auth_tokens: str = ""
    """Accepted tokens, comma-separated (``VOICEAGENT_SERVER__AUTH_TOKENS``).  Clients send one as
    ``Authorization: Bearer <token>``, as the WebSocket subprotocol ``openai-insecure-api-key.<token>``
    (browsers), or in the URL (``?token=`` or Twilio's ``/twilio/<token>``)."""
    allowed_origins: str = ""
    """Browser origins allowed besides the server's own, comma-separated (``*``: any).  A
    WebSocket upgrade from another origin is refused with HTTP 403; clients that send no
    ``Origin`` (SDKs, Twilio) are not affected."""
    certfile: str = ""
    """TLS certificate (PEM); with ``keyfile`` the server speaks wss:// and https://."""
    keyfile: str = ""
    audio_burst_s: float = 10.0
    """How far ahead of real time a client may send audio; audio past that is refused with an
    ``input_audio_rate_exceeded`` error (0: no limit)."""
    max_session_s: float = 3600.0
    """A session longer than this is ended: an ``error`` event (``session_expired``), then close
    code 1008 (0: no limit)."""
    idle_timeout_s: float = 300.0
    """A client that sends nothing for this long is closed the same way (``session_idle``; 0: no limit)."""
    drain_s: float = 10.0
    """On SIGTERM: new sessions are refused (503) while replies in progress get this long to
    finish; then every session is closed and the process exits 0."""
    max_history_items: int = 200
    """Items a conversation keeps; the oldest are dropped (``conversation.item.deleted``) past it."""
    ice_servers: str = ""
    """WebRTC calls (``POST /v1/realtime/calls``): STUN/TURN servers the server's side gathers
    candidates through, comma-separated (``stun:stun.example.org:3478``,
    ``turn:user:secret@turn.example.org:3478``); empty, the default: host candidates only (this
    machine's addresses, loopback included), which serve a LAN.  Clients behind NAT need a TURN
    server (docs/webrtc.md)."""
    webrtc_media_timeout_s: float = 10.0
    """A WebRTC call whose microphone track has sent nothing for this long has lost its peer: it
    is ended and its session slot freed (browsers send audio, silence included, all the time)."""
    sip_port: int = 0
    """Answer SIP calls on this port, UDP and TCP (0, the default: off).  A gateway process
    (PJSIP, the ``sip`` extra) bridges each call to a session of this server, as a Twilio call is
    (docs/telephony.md)."""
    sip_host: str = ""
    """The address SIP listens on ("": ``server.host``)."""
    sip_allow: str = "127.0.0.1,::1"
    """Addresses or networks (``10.0.0.0/8``) a call may come from, comma-separated (``*``: any):
    your PBX or SIP trunk.  An INVITE from anywhere else is refused with 403, before any session."""
    sip_register: str = ""
    """Register the gateway at a PBX or SIP trunk as this account, ``sip:user@registrar[:port]``,
    with digest credentials: the password is ``VOICEAGENT_SIP_PASSWORD`` in ``serve``'s
    environment (never in a file).  The registrar's calls to the account come here; its address
    may call ("": no registration; the PBX routes to ``sip_host`` by address)."""
    sip_auth_user: str = ""
    """The digest user name for ``sip_register`` ("": the account's user)."""
    sip_max_calls: int = 4
    """SIP calls at once; the next caller gets 486 (busy).  Each call is also a session, so
    admission by load applies to it as to any other.  At most :data:`SIP_CALLS_LIMIT`: the
    packaged PJSIP holds no more."""
    sip_webhook_url: str = ""
    """OpenAI's call-control API: each SIP call rings while ``realtime.call.incoming`` is POSTed
    here, signed with ``sip_webhook_secret``; the application answers it with
    ``POST /v1/realtime/calls/{call_id}/accept`` (or ``reject``) (docs/telephony.md).  "" (the
    default): every call is answered at once with the server's own session."""
    sip_webhook_events: str = "realtime.call.incoming,live.transport.incoming"
    """Which events announce a ringing call at ``sip_webhook_url``, as an OpenAI webhook endpoint
    subscribes to them: ``realtime.call.incoming`` (answered with
    ``POST /v1/realtime/calls/{call_id}/accept``), ``live.transport.incoming`` (GPT-Live:
    ``POST /v1/live/sessions/{session_id}/accept``), or both, comma-separated (the default: the
    first accept, on either API, decides which protocol the call speaks).  The call rings while
    at least one was taken."""
    sip_webhook_secret: str = ""
    """The webhooks' signing secret (``whsec_`` + base64, as OpenAI's; the application's
    ``client.webhooks.unwrap`` checks it).  Needed with ``sip_webhook_url``."""
    sip_accept_timeout_s: float = 30.0
    """A call the application neither accepts nor rejects within this long after taking the webhook
    is refused (480); the webhook's POST itself may take up to 10 s more."""
    recordings_dir: str = ""
    """Phone calls (SIP and Twilio) recorded in this folder of the server's own disk: per call a
    two-channel WAV (caller, agent) and a JSON transcript with each turn's timings
    (transports/call_recording.py).  "" (the default): nothing is recorded."""
    recordings_keep_days: float = 30.0
    """Recordings older than this are deleted (at start-up and after each call)."""

    def __post_init__(self) -> None:
        _check(self.auth in ("auto", "on", "off"), "server.auth", "must be auto, on or off")
        _check(bool(self.certfile) == bool(self.keyfile), "server.certfile", "needs server.keyfile too (and the other way round)")
        _check(self.audio_burst_s >= 0, "server.audio_burst_s", "must be >= 0")
        _check(self.max_session_s >= 0, "server.max_session_s", "must be >= 0")
        _check(self.idle_timeout_s >= 0, "server.idle_timeout_s", "must be >= 0")
        _check(self.drain_s >= 0, "server.drain_s", "must be >= 0")
        _check(self.max_history_items >= 2, "server.max_history_items", "must be >= 2")
        _check(self.webrtc_media_timeout_s > 0, "server.webrtc_media_timeout_s", "must be > 0")
        _check(0 <= self.port <= 65535, "server.port", "must be 0..65535")
        _check(self.max_message_bytes >= 1024, "server.max_message_bytes", "must be at least 1024")
        _check(self.max_sessions >= 0, "server.max_sessions", "must be >= 0 (0: admission by load)")
        _check(self.latency_budget_ms >= 100, "server.latency_budget_ms", "must be >= 100")
        _check(0 < self.load_threshold <= 1, "server.load_threshold", "must be in (0, 1]")
        _check(0 <= self.agent_port <= 65535, "server.agent_port", "must be 0..65535")
        _check(self.turn_budget_ms >= 100, "server.turn_budget_ms", "must be >= 100")
        _check(0 <= self.sip_port <= 65535, "server.sip_port", "must be 0..65535 (0: off)")
        _check(self.sip_max_calls >= 1, "server.sip_max_calls", "must be >= 1")
        if self.sip_port:  # a config from before the limit still serves with SIP off
            why = f"must be at most {SIP_CALLS_LIMIT}: the packaged PJSIP (pjsua2-python) holds at most {SIP_CALLS_LIMIT} calls at once"
            _check(self.sip_max_calls <= SIP_CALLS_LIMIT, "server.sip_max_calls", why)
        if self.sip_register:
            account = re.fullmatch(r"sips?:[^@\s:;]+@[^@\s;]+", self.sip_register)
            _check(account is not None, "server.sip_register", "must be sip:user@registrar[:port]")
        _check(self.sip_accept_timeout_s > 0, "server.sip_accept_timeout_s", "must be > 0")
        _check(self.recordings_keep_days > 0, "server.recordings_keep_days", "must be > 0")
        if self.sip_webhook_url:
            _check(self.sip_webhook_url.startswith(("http://", "https://")), "server.sip_webhook_url", "must be an http(s) URL")
            _check(bool(self.sip_webhook_secret), "server.sip_webhook_secret", "is needed with server.sip_webhook_url")
        events = self.webhook_events
        why = f"must name one or both of {', '.join(SIP_WEBHOOK_EVENTS)}"
        _check(bool(events) and all(e in SIP_WEBHOOK_EVENTS for e in events), "server.sip_webhook_events", why)
        if self.sip_webhook_secret.startswith("whsec_"):
            try:
                base64.b64decode(self.sip_webhook_secret[6:], validate=True)
            except ValueError:
                _check(False, "server.sip_webhook_secret", "is base64 after its whsec_ prefix")
        for entry in (e.strip() for e in self.sip_allow.split(",")):
            if entry and entry != "*":
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    _check(False, "server.sip_allow", f"has {entry!r}, which is not an address or network")

    @property
    def webhook_events(self) -> tuple[str, ...]:
        """``sip_webhook_events`` as a list: each named once, in order."""
        return tuple(dict.fromkeys(e.strip() for e in self.sip_webhook_events.split(",") if e.strip()))


@dataclass(frozen=True)
class VadConfig:
    model: str = "silero"
    device: str = "cpu"
    """``cpu`` or ``cuda``.  The gpu profile keeps the VAD on the CPU: one 32 ms window took
    0.11 ms there against 0.75 ms through CUDA on an H100 (docs/gpu_probe.md)."""
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    stop_ms: int = 160
    """Silence that ends a speech *segment*: the transcript is finalised (and speculation starts)."""
    min_speech_ms: int = 96
    """Speech must last this long before it counts as started (filters clicks).  Dips of up to
    64 ms between syllables do not restart the count (see stages.vad.VadTracker)."""
    barge_in_ms: int = 320
    """Speech must last this long while the agent talks before it interrupts (filters coughs);
    counted as for ``min_speech_ms``."""
    noise_reduction: str = ""
    """A new session's noise suppression of its input audio, before the VAD and the transcriber
    (:mod:`voiceagent.denoise`): ``""`` (off, the default: docs/decisions/noise-suppression.md
    measures where it pays), ``near_field`` or ``far_field`` (the same suppressor).  A Realtime
    session changes its own with ``audio.input.noise_reduction``."""

    def __post_init__(self) -> None:
        _check(self.device in DEVICES, "vad.device", "must be cpu or cuda")
        _check(0.0 < self.threshold < 1.0, "vad.threshold", "must be between 0 and 1")
        _check(self.stop_ms >= 32, "vad.stop_ms", "must be at least 32")
        _check(self.prefix_padding_ms >= 0, "vad.prefix_padding_ms", "must be >= 0")
        _check(self.min_speech_ms >= 0, "vad.min_speech_ms", "must be >= 0")
        _check(self.barge_in_ms >= 0, "vad.barge_in_ms", "must be >= 0")
        _check(self.noise_reduction in ("", "near_field", "far_field"), "vad.noise_reduction", 'must be "", near_field or far_field')


@dataclass(frozen=True)
class SttConfig:
    model: str = "whisper-tiny"
    language: str = "en"
    device: str = "cpu"
    """``cpu`` or ``cuda`` (CTranslate2 built for the machine's CUDA)."""
    compute_type: str = "auto"
    """CTranslate2 compute type: ``auto`` = int8 on the CPU, float16 on CUDA."""
    threads: int = 1
    """One thread: tiny's short-window decode was as fast on one as on two (105 vs 130-180 ms
    for the start-up probe clip), and with several sessions the other core is the LLM's."""
    beam_size: int = 1
    partials: bool = True
    partial_interval_ms: int = 1200
    """Audio between two partial decodes while the user speaks (each costs an encoder pass)."""
    partial_model: str = ""
    """The model partial transcripts are decoded with, greedy ("": ``model`` itself).  The final
    transcript, which the answer is judged by, stays ``model``'s; a partial only lets the LLM
    evaluate the user's words while they still speak (``llm.prefill``) and shows progress, so a
    cheaper model there costs no accuracy.  Both share one decoder thread, so a final still runs
    before any queued partial.  In ``quality``: Whisper base at beam 5 for the final, tiny for
    the partials (docs/decisions/partial-model.md)."""
    window_s: int = 0
    """Encoder window: 0 = auto (clip + 1 s, rounded up to 5 s, at least 10 s); 30 = Whisper's classic."""
    early_decode: bool = True
    """Start the final decode at the first silent VAD window, before the segment is declared over."""
    rejoin: bool = True
    """Transcribe a turn of several segments (a pause mid-sentence) again as one clip: Whisper
    hears a half sentence worse than a whole one.  One more decode, on those turns only."""
    batch: int = 1
    """Final decodes of several sessions that wait for Whisper at the same time are decoded as
    one batch of up to this many (1: one by one, the default).  Nothing waits to fill a batch: a
    decode that finds Whisper idle runs alone.  Off by default: on 2 cores a batch was cheaper
    than its decodes one by one but the server's turns were no faster, because one by one lets
    the first caller's LLM start on the other core (docs/decisions/whisper-batch.md)."""
    tools_prompt: bool = False
    """Where the client set no transcription prompt, give Whisper the descriptions of the
    session's tools as the text before the speech (:mod:`voiceagent.text.stt_prompt`).  On in the
    ``quality`` profile: on 130 spoken tool requests Whisper base at beam 5 went from 13.2 to
    12.0 % WER and heard "weather" in 18 of 20 instead of 11 ("What's the winner in Paris?"), on
    the eval's 335 other questions from 11.3 to 11.4 %, for about 15 ms more per decode.  Off for
    tiny, which lost 2.7 points on those (14.6 -> 17.3 %).  ``benchmarks/eval_stt.py``,
    docs/decisions/stt-tools-prompt.md."""

    def __post_init__(self) -> None:
        _check(self.threads >= 1, "stt.threads", "must be >= 1")
        _check(self.device in DEVICES, "stt.device", "must be cpu or cuda")
        _check(
            self.compute_type in ("auto", "int8", "int8_float16", "float16", "float32"),
            "stt.compute_type",
            "must be auto, int8, int8_float16, float16 or float32",
        )
        _check(0 <= self.window_s <= 30, "stt.window_s", "must be 0..30")
        _check(self.beam_size >= 1, "stt.beam_size", "must be >= 1")
        _check(1 <= self.batch <= 64, "stt.batch", "must be 1..64")
        _check(self.partial_interval_ms >= 200, "stt.partial_interval_ms", "must be >= 200")


@dataclass(frozen=True)
class TurnConfig:
    model: str = "smart-turn-v3"
    """End-of-turn model, or "none" to use the silence threshold alone."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (onnxruntime-gpu); one check took 62 ms on a CPU core, 2.1 ms on an H100."""
    silence_ms: int = 500
    """Silence that ends a turn whatever the model says (the fallback; OpenAI's silence_duration_ms)."""
    complete_ms: int = 400
    """Silence that ends a turn when the turn model judges it complete.  Longer than the common
    300-400 ms mid-sentence pause: at 240 ms the model's mistakes cut users off
    (docs/decisions/turn-complete-ms.md), and on 2 cores the first audio is not ready much before 500 ms anyway."""
    incomplete_ms: int = 1500
    """Silence that ends a turn whose transcript stops where a sentence cannot end ("the capital
    of", "remind me to", "um"; voiceagent/text/turn_words.py), when longer than ``silence_ms``.  The
    turn model, which judges by sound, calls most such pauses complete; 0 turns the rule off."""
    text_threshold: float = 0.003
    """The LLM's probability that the user's sentence ends after their words, below which the
    turn waits ``doubt_ms`` of silence: read from the speculative answer's prompt, as it starts,
    on the embedded LLM only (0: off).  At 0.003 the 0.5B holds every first half of the eval's
    paused questions and none of their whole texts (benchmarks/eval_end_of_turn.py); in the spoken
    eval it took false cut-offs from 5 to 3 of 9 at the same p50 (docs/decisions/text-end-of-turn.md).  Needs ``speculative``."""
    doubt_ms: int = 1000
    """Silence that ends a turn whose words the LLM doubts end a sentence (``text_threshold``),
    when longer than ``silence_ms``.  Shorter than ``incomplete_ms``: the doubt is wrong more
    often (a misheard whole question scores low too), and such a question waits this long."""
    threshold: float = 0.5
    speculative: bool = True
    """Start answering at the end of a segment; hold the audio until the turn is confirmed."""
    interruption: str = "words"
    """What speech over the agent's audio does (with the client's ``interrupt_response``, the
    default): ``immediate`` cuts the reply once ``vad.barge_in_ms`` of voice is heard; ``words``
    pauses the reply's audio after ``vad.min_speech_ms`` of voice and cuts it only when the
    transcript holds ``interruption_min_words`` words that are not a backchannel ("yeah",
    "right", "uh-huh": ``backchannels``); after a backchannel, a cough or a noise the reply
    resumes where it paused and stays whole (docs/pipeline.md, "Interruptions")."""
    interruption_min_words: int = 1
    """``words``: real words (not backchannels) that make speech over the agent an interruption."""
    false_interruption_timeout_ms: int = 1000
    """``words``: once the user's speech has stopped, the paused reply resumes after this long if
    no transcript has decided (the transcriber normally decides sooner)."""
    interruption_margin_db: float = 10.0
    """``words``: speech this much quieter than the user's own voice in their earlier turns (a
    second voice in the room, a radio) does not interrupt; 0: every voice counts."""
    interruption_min_confidence: float = 0.12
    """``words``: a transcript that the transcriber is less sure of than this (0..1; Whisper: its
    tokens' mean probability times the chance of speech) is a sound it wrote as words (a hum as
    "BAM", an "ooh" as "OO", a growl as a sentence) and does not interrupt, unless it holds a word
    that takes the floor ("stop", "wait"); 0: never doubted (docs/decisions/interruptions.md)."""
    interruption_sound_margin: float = 1.0
    """``words``: speech over the agent that would interrupt (one or two real words, none taking
    the floor) is read a second time in backchannels and sounds only ("mm", "yeah", "ugh"...); when that reading
    is at most this much less likely than the transcript (nats), the words were a sound Whisper
    wrote as words ("Mm-hmm, sure." as "and mamam") and do not interrupt; a negative value:
    no second reading (docs/decisions/interruptions.md)."""
    sound_model: str = "yamnet"
    """``words``: the sound-event model that reads speech over the agent a second way (YAMNet,
    packaged: ``yamnet``), or ``none``.  It runs only on speech over the agent that would
    otherwise interrupt, never on an ordinary turn."""
    interruption_min_speech: float = 0.3
    """``words``: speech over the agent in which the sound model hears speech less likely than
    this (0..1) is a sound whatever Whisper wrote (a tongue click as "Just..."), unless its words
    take the floor or ask a question; 0: the sound model never dismisses
    (docs/decisions/interruptions.md)."""
    backchannels: str = ""
    """``words``: comma-separated phrases that never interrupt; empty: the built-in list of
    ``stt.language`` (voiceagent/text/backchannel.py)."""

    def __post_init__(self) -> None:
        _check(self.silence_ms >= 100, "turn.silence_ms", "must be >= 100")
        _check(self.device in DEVICES, "turn.device", "must be cpu or cuda")
        _check(self.complete_ms >= 0, "turn.complete_ms", "must be >= 0")
        _check(self.incomplete_ms >= 0, "turn.incomplete_ms", "must be >= 0")
        _check(0.0 < self.threshold < 1.0, "turn.threshold", "must be between 0 and 1")
        _check(0.0 <= self.text_threshold < 1.0, "turn.text_threshold", "must be >= 0 and < 1")
        _check(self.doubt_ms >= 0, "turn.doubt_ms", "must be >= 0")
        _check(self.interruption in ("immediate", "words"), "turn.interruption", "must be immediate or words")
        _check(self.interruption_min_words >= 1, "turn.interruption_min_words", "must be >= 1")
        _check(self.false_interruption_timeout_ms >= 0, "turn.false_interruption_timeout_ms", "must be >= 0")
        _check(self.interruption_margin_db >= 0, "turn.interruption_margin_db", "must be >= 0")
        _check(0.0 <= self.interruption_min_confidence < 1.0, "turn.interruption_min_confidence", "must be >= 0 and < 1")
        _check(self.sound_model in ("yamnet", "none"), "turn.sound_model", "must be yamnet or none")
        _check(0.0 <= self.interruption_min_speech < 1.0, "turn.interruption_min_speech", "must be >= 0 and < 1")


@dataclass(frozen=True)
class LlmConfig:
    backend: str = "llama_cpp"
    """``llama_cpp`` (in process), ``openai`` (any OpenAI-compatible server at ``base_url``) or
    ``vllm`` (vLLM's engine in process)."""

    @property
    def fallback_backend(self) -> str | None:
        """The fallback engine this configuration gets (None: none)."""
        if self.fallback == "none" or (self.fallback == "auto" and self.backend == "llama_cpp"):
            return None
        return "llama_cpp"

    model: str = "qwen2.5-0.5b"
    """llama_cpp: a catalog name, a ``.gguf`` path or a hub id (``ORG/REPO:FILE`` or
    ``ORG/REPO:QUANT``; voiceagent.models.source); openai: the model name the server expects;
    vllm: a catalog name (converted once), or a Hugging Face folder or id."""
    quant: str = "iq4_nl"
    """llama_cpp: the weights as run.  ``shipped``: the GGUF as its packages carry it (Q4_K_M, in
    fact mostly Q5_0 tensors for the 0.5B); ``iq4_nl`` or ``q4_0``: converted from it once, at
    set-up or first load, into the cache (llama.cpp's own quantizer).  IQ4_NL took 22–29 % less
    time per token and 18–37 % less per prompt on a 2-core CPU (benchmarks/llm_weights.py), and
    llama.cpp keeps a 183 MB repacked copy per context (28 MB shipped).
    The 0.5B's answers scored within one question of the shipped file's on the text eval, but
    41.8 against 47.8 % right on the same misheard transcripts (docs/decisions/llm-weights.md).
    Catalog models only: a GGUF given as a path or hub id runs as given."""
    threads: int = 2
    context: int = 2048
    batching: bool = True
    """llama_cpp: one context whose ``sequences`` conversations decode together, one token of each
    per step (backends/batch_engine.py: one copy of the weights, one KV cache).  False: the older
    pool of ``contexts`` contexts stepped one at a time (backends/llm_pool.py), kept for comparison."""
    sequences: int = 16
    """llama_cpp with ``batching``: conversations that keep their prompt prefix in the KV cache at
    once; a turn of a further one takes the least recently used idle sequence."""
    kv_tokens: int = 0
    """llama_cpp with ``batching``: the KV cache's cells, shared by every sequence (a prefix several
    conversations share is held once); 0 = max(16384, 2 × ``context``).  About 12 KB a token for
    the 0.5B, 28 KB for the 1.5B; when it is full, idle conversations' cells go first."""
    flash_attn: bool = False
    """llama_cpp with ``batching``: llama.cpp's flash attention (its own default turns it on for a
    CPU too).  Off: on this CPU, with 12,000 characters of instructions, a turn's 32 new prompt
    tokens took half the time and a step of eight conversations 40 % less; with short
    instructions the two were level.  On, only a prompt nobody has cached yet (a client's own
    long instructions, read on its first turn) goes 10–20 % faster
    (docs/decisions/flash-attention.md).  The pool without ``batching`` always runs it off."""
    contexts: int = 8
    """llama_cpp without ``batching``: KV contexts over the one memory-mapped model (~25 MB each for the 0.5B at 2k).
    A conversation keeps its prefix warm in its own context while there are at least as many
    contexts as conversations; beyond that the least recently used one is re-read."""
    context_shift: bool = True
    """llama_cpp: when a conversation is cut to fit ``context``, the KV cells of the turns kept
    move back over the dropped ones instead of being evaluated again (a cut then costs
    milliseconds, not seconds of prefill).  Those cells were computed with the dropped turns in
    view; false re-reads them, exact and slower (docs/decisions/context-shift.md)."""
    base_url: str = "http://127.0.0.1:8080/v1"
    """openai: the server's API root (``…/v1``)."""
    api_key: str = ""
    """openai: sent as a bearer token when set (``VOICEAGENT_LLM__API_KEY``)."""
    first_token_timeout_s: float = 5.0
    """openai: a server that sends no token within this fails the turn with a clear error."""
    gpu_memory_utilization: float = 0.8
    """vllm: the share of the GPU's memory vLLM takes (weights and KV cache); the rest is left to
    the speech models on the same device (about 2.6 GiB: docs/gpu_probe.md).  Ignored on a CPU."""
    speculative_config: str = ""
    """vllm: speculative decoding, as the JSON object vLLM's ``speculative_config`` takes, passed
    through as is: ``{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}``,
    or a draft model ``{"model": "<folder>", "num_speculative_tokens": 3}``.  Empty: off."""
    fallback: str = "auto"
    """The engine that answers a turn the configured one fails or is too slow for (a circuit
    breaker, see backends/fallback.py): ``auto`` = the embedded ``llama_cpp`` model unless the
    backend is already ``llama_cpp``; ``llama_cpp``; or ``none``.  With ``backend = "llama_cpp"``
    too, ``llama_cpp`` is a second in-process pool of its own contexts running ``fallback_model``
    (say the 0.5B behind a bigger primary): it answers a turn whose primary fails, or whose first
    text is late because every primary context is busy."""
    fallback_model: str = "qwen2.5-0.5b"
    """The model the embedded fallback runs (a catalog name, a ``.gguf`` path or a hub id)."""
    fallback_contexts: int = 2
    """KV contexts of the embedded fallback (it answers only while the primary is failing)."""
    first_token_budget_ms: int = 1500
    """With a fallback: a turn whose first text the primary has not sent by then is answered by
    the fallback (the primary's request is aborted)."""
    breaker_failures: int = 3
    """Failed or late turns in a row that open the breaker: later turns go straight to the fallback."""
    breaker_reset_s: float = 30.0
    """How long the breaker stays open before one turn probes the primary again."""
    route: str = "off"
    """Per-turn routing (backends/router.py): ``rules`` sends social turns (greetings, thanks,
    farewells, yes/no, names: text/turn_kind.py) to the embedded ``route_model`` and the rest to
    ``model``; ``off``: every turn to ``model``.  Off in every profile: on the spoken eval it was
    not as accurate as the large model alone (docs/decisions/routing.md)."""
    route_model: str = "qwen2.5-0.5b"
    """The small model routed turns go to (embedded llama_cpp; a catalog name, ``.gguf`` path or
    hub id).  When it is also ``fallback_model`` the two are one engine."""
    route_contexts: int = 4
    """Sequences (KV contexts) of the small model's engine when it is not the fallback's."""
    max_tokens: int = 80
    temperature: float = 0.0
    call_bias: float = 1.0
    """llama_cpp, tools offered with ``tool_choice`` "auto": added to the logits of the tokens a
    call starts with (``<tool_call>``, ``<``, `````) at the reply's first token only.  The 1.5B as
    shipped wavered there between making a weather call and telling the user how to make it ("you
    can call the `get_weather` function…"): its first-token logits were 0.06–0.53 apart, and 2.9
    or more apart on the questions that need no tool (benchmarks/eval_tools.py;
    docs/decisions/tool-calls.md).  0: off."""
    call_grounding: bool = True
    """Tools offered with ``tool_choice`` "auto": a call whose text arguments share no word with
    anything said in the conversation (the 0.5B's ``get_weather("London")`` for "Hello.") is not
    made, and the turn is answered in words (voiceagent/tools/grounding.py).  False for tools
    whose text arguments the model works out rather than repeats ("NYC" → "New York")."""
    call_check: bool = False
    """Tools offered with ``tool_choice`` "auto", after the conversation's first exchange: decide
    whether the user's last words ask for a tool on the prompt they would have had as the first
    turn (the system message and those words, one token), and ask the turn with "required" when
    they do.  After a few exchanges answered in words the packaged models stopped calling tools
    (the 1.5B called 5 of 18 in a long conversation, the 0.5B none).  Off by default: the 0.5B's
    one token opens a call for most sentences that need no tool (5–9 of 14), and the check is a
    pass of its own over the last words against the whole instructions (0.5–0.7 s a turn with
    45,000 characters); with the 1.5B and a deployment's own instructions it made no false call
    (docs/decisions/tool-calls.md)."""
    instructions: str = DEFAULT_INSTRUCTIONS
    examples: str = ""
    """Example exchanges placed after the system message: ``User: ...`` and ``Assistant: ...`` lines
    taking turns ("" for none; ``DEFAULT_EXAMPLES`` is a measured set).  They go with the server's
    instructions: a client that sends its own (``session.update`` or ``response.create``) gets
    none, and neither does a prompt offering tools."""
    yield_to_tts: bool = True
    """Order work on the two cores along the critical path (see pipeline/gate.py)."""
    prefill: bool = True
    """Evaluate the coming prompt (the history and the user's words so far) with each partial
    transcript, while the user still speaks, so the answer pays only for the last words
    (llama_cpp only; see LlmEngine.prefill)."""
    first_clause_words: int = 4
    """Cut the first clause after this many words when no punctuation came, backing off before
    trailing function words (0: never).  Why 4: docs/decisions/first-clause-words.md."""
    acknowledge_ms: int = -1
    """A user turn's answer that has no words this long after the LLM was asked starts with a
    short spoken acknowledgement ("Let's see.") while the model thinks on; -1: never; 0: every
    spoken turn's, said before the model is asked (its voice gets the cores first).  Above 0,
    not on the small route's turns (``route``), whose model is the quick one.  An
    acknowledgement is not an answer: the turn metrics' ``content_audio_sent`` is when the
    content starts.  Off by default: on two cores it delays the content
    (docs/reports/acknowledge-2026-12-02.md)."""

    def __post_init__(self) -> None:
        _check(self.quant in LLM_QUANTS, "llm.quant", "must be one of " + ", ".join(LLM_QUANTS))
        _check(self.threads >= 1, "llm.threads", "must be >= 1")
        _check(0.0 <= self.call_bias <= 10.0, "llm.call_bias", "must be 0..10")
        _check(self.context >= 256, "llm.context", "must be >= 256")
        _check(1 <= self.contexts <= 64, "llm.contexts", "must be 1..64")
        _check(1 <= self.sequences <= 256, "llm.sequences", "must be 1..256")
        _check(self.kv_tokens == 0 or self.kv_tokens >= self.context, "llm.kv_tokens", "must be 0 or >= llm.context")
        _check(self.first_token_timeout_s > 0, "llm.first_token_timeout_s", "must be > 0")
        _check(self.fallback in ("auto", "llama_cpp", "none"), "llm.fallback", "must be auto, llama_cpp or none")
        _check(0.05 <= self.gpu_memory_utilization <= 0.98, "llm.gpu_memory_utilization", "must be 0.05..0.98")
        _check(_json_object(self.speculative_config), "llm.speculative_config", "must be empty or a JSON object")
        _check(1 <= self.fallback_contexts <= 64, "llm.fallback_contexts", "must be 1..64")
        _check(self.route in ("off", "rules"), "llm.route", "must be off or rules")
        _check(1 <= self.route_contexts <= 64, "llm.route_contexts", "must be 1..64")
        _check(self.first_token_budget_ms >= 50, "llm.first_token_budget_ms", "must be >= 50")
        _check(self.breaker_failures >= 1, "llm.breaker_failures", "must be >= 1")
        _check(self.breaker_reset_s >= 0, "llm.breaker_reset_s", "must be >= 0")
        _check(self.base_url.startswith(("http://", "https://")), "llm.base_url", "must be an http:// or https:// URL")
        _check(1 <= self.max_tokens <= 4096, "llm.max_tokens", "must be 1..4096")
        _check(0.0 <= self.temperature <= 2.0, "llm.temperature", "must be 0..2")
        _check(0 <= self.first_clause_words <= 100, "llm.first_clause_words", "must be 0..100")
        _check(-1 <= self.acknowledge_ms <= 60_000, "llm.acknowledge_ms", "must be -1 (never) or 0..60000")
        try:
            parse_examples(self.examples)
        except ValueError as exc:
            _check(False, "llm.examples", str(exc))

    @property
    def example_pairs(self) -> tuple[tuple[str, str], ...]:
        """``examples`` as ``(user, assistant)`` pairs."""
        return parse_examples(self.examples)


@dataclass(frozen=True)
class TtsConfig:
    model: str = "joe"
    """The default voice, and its name in the voice table (``session.update``'s ``voice``)."""
    voices: str = ""
    """More voices a client may pick by name: ``name=model`` pairs separated by commas
    (``calm=en_US-lessac-medium, mine=/voices/me.onnx``), each model a catalog name, a Piper
    voice name, an ``.onnx`` path or a hub id, as ``model``.  Each is loaded once per process at
    start-up and shared by the sessions that pick it."""
    openai_voices: str = ""
    """Which voice of the table each OpenAI voice name (:data:`OPENAI_VOICES`) speaks with:
    ``name=voice`` pairs separated by commas (``ash=calm, marin=mine``); a name not given speaks
    with ``model``.  A table name (``model`` or ``voices``) that is also an OpenAI name is that
    voice of the table, not this mapping."""
    speed: float = 1.0
    threads: int = 2
    ahead_ms: int = 0
    """A reply's later clauses are synthesized once its audio not yet played falls under this
    (0, the default: each as soon as it arrives).  Off: on 2 cores it brought other sessions'
    first audio forward a little but left longer silences inside replies under load
    (docs/decisions/tts-pacing.md)."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (onnxruntime-gpu, with cuDNN's heuristic convolution search: every reply
    has a new length, and the exhaustive search costs ~850 ms per new length)."""

    def __post_init__(self) -> None:
        _check(self.device in DEVICES, "tts.device", "must be cpu or cuda")
        _check(0.25 <= self.speed <= 4.0, "tts.speed", "must be 0.25..4")
        _check(self.threads >= 1, "tts.threads", "must be >= 1")
        _check(self.ahead_ms >= 0, "tts.ahead_ms", "must be >= 0")
        try:
            self.voice_table  # noqa: B018 - parsed here so that a bad table fails at start-up
        except ValueError as exc:
            _check(False, "tts.voices", str(exc))
        try:
            self.openai_voice_map  # noqa: B018 - as above
        except ValueError as exc:
            _check(False, "tts.openai_voices", str(exc))

    @property
    def voice_table(self) -> dict[str, str]:
        """Voice name → model: ``model`` under its own name first, then ``voices``."""
        table = {self.model: self.model}
        for entry in (e.strip() for e in self.voices.split(",")):
            if not entry:
                continue
            name, sep, model = (x.strip() for x in entry.partition("="))
            if not sep or not _VOICE_NAME.fullmatch(name) or not model:
                raise ValueError(f"{entry!r} is not name=model (a name of 1-64 letters, digits, '.', '_' or '-')")
            if name in table:
                raise ValueError(f"voice {name!r} is named twice")
            table[name] = model
        return table

    @property
    def openai_voice_map(self) -> dict[str, str]:
        """OpenAI voice name → the name of the table's voice it speaks with (every OpenAI name)."""
        table = self.voice_table
        mapping = dict.fromkeys(OPENAI_VOICES, self.model)
        given: set[str] = set()
        for entry in (e.strip() for e in self.openai_voices.split(",")):
            if not entry:
                continue
            name, sep, voice = (x.strip() for x in entry.partition("="))
            if not sep or name not in OPENAI_VOICES:
                raise ValueError(f"{entry!r} is not name=voice with name one of OpenAI's voices ({', '.join(OPENAI_VOICES)})")
            if voice not in table:
                raise ValueError(f"{entry!r}: {voice!r} is not a voice of the table ({', '.join(table)}; add it to tts.voices)")
            if name in given:
                raise ValueError(f"OpenAI voice {name!r} is mapped twice")
            given.add(name)
            mapping[name] = voice
        return mapping

    def resolve_voice(self, name: str) -> str | None:
        """The table's voice that a client's ``voice`` ``name`` speaks with: a table name as it
        is, an OpenAI voice name as :attr:`openai_voice_map` maps it; None for any other name."""
        if name in self.voice_table:
            return name
        return self.openai_voice_map.get(name)


@dataclass(frozen=True)
class PlayoutConfig:
    lead_ms: int = 250
    """How far ahead of the listener's playback audio is sent; what is not sent yet is never heard.
    It is also what plays on after the user starts speaking over the agent (the pause cannot
    take back what the client holds): 250 ms keeps the agent's audio stopping within 600 ms of
    the user's first sound (docs/decisions/interruptions.md); raise it for links with more jitter."""
    chunk_ms: int = 100

    def __post_init__(self) -> None:
        _check(self.lead_ms >= 0, "playout.lead_ms", "must be >= 0")
        _check(10 <= self.chunk_ms <= 1000, "playout.chunk_ms", "must be 10..1000")


@dataclass(frozen=True)
class ToolsConfig:
    builtin: bool = False
    """Offer the server's own tools (voiceagent/tools/builtin.py: the time and date, timers) in
    every session, run them in the server and answer with their result (``--tools``)."""
    mcp_timeout_s: float = 5.0
    """How long connecting to an MCP server and listing its tools, or one call of its tools (a
    session's ``{"type": "mcp"}`` tool), may take before it counts as failed: the agent then
    apologises instead of leaving the listener in silence."""
    mcp_hosts: str = ""
    """Internal hosts a client's MCP tool may name (``host`` or ``host:port``, comma-separated).
    Any other host that is, or resolves to, a loopback, private or link-local address is refused:
    a client must not make the server reach its own network.  Empty: public hosts only."""

    def __post_init__(self) -> None:
        _check(0 < self.mcp_timeout_s <= 300, "tools.mcp_timeout_s", "must be > 0 and <= 300")

    @property
    def mcp_allowed(self) -> frozenset[str]:
        """``mcp_hosts`` as a set of lower-case ``host`` / ``host:port`` entries."""
        return frozenset(h.strip().lower() for h in self.mcp_hosts.split(",") if h.strip())


@dataclass(frozen=True)
class CacheConfig:
    semantic: bool = False
    """The semantic reply cache (voiceagent/cache): a conversation's first question, close in
    meaning to one already answered in the same deployment (the same instructions, tools, model
    and voice), is answered with that reply's text and audio, without the LLM or the TTS.  Off by
    default (``--set cache.semantic=true``)."""
    embed_model: str = "all-minilm-l6-v2"
    """The sentence-embedding model that keys the cache (a catalog name or a folder)."""
    threshold: float = 0.58
    """The cosine similarity a hit needs besides the lexical guards (voiceagent/text/
    question_match.py): the highest that loses none of the paraphrases of
    benchmarks/eval_cache_pairs.toml that the guards let through; the guards alone refuse all its
    near misses (benchmarks/eval_cache.py, docs/reports/semantic-cache-2026-11-26.md)."""
    ttl_s: float = 3600.0
    """How long a reply stays reusable."""
    max_entries: int = 2000
    """Past this many replies, the least recently used goes."""
    max_mb: int = 128
    """Past this much stored audio (MiB), the least recently used replies go: a reply of 5 s at
    22,050 Hz holds about 220 KB, so the default keeps about 600 of them."""
    max_temperature: float = 0.7
    """Replies sampled hotter than this are not stored: the deployment wants variety."""

    def __post_init__(self) -> None:
        _check(0.0 < self.threshold <= 1.0, "cache.threshold", "must be > 0 and <= 1")
        _check(self.ttl_s > 0, "cache.ttl_s", "must be > 0")
        _check(self.max_entries >= 1, "cache.max_entries", "must be >= 1")
        _check(self.max_mb >= 1, "cache.max_mb", "must be >= 1")
        _check(0.0 <= self.max_temperature <= 2.0, "cache.max_temperature", "must be 0..2")


@dataclass(frozen=True)
class PhoneConfig:
    tools: bool = False
    """Offer the call-control tools on phone calls (voiceagent/tools/phone.py): ``end_call`` (the
    agent says goodbye, then hangs up) and ``send_dtmf`` (keypad tones, for a phone menu); plus
    ``transfer_call`` where ``transfer_targets`` names somewhere to send callers.  Off by default:
    the default 0.5B model chose the wrong one (``end_call`` for "put me through to sales") and
    their listing costs each call's first answer (docs/reports/phone-tools-2026-12-02.md); turn it
    on with a model that calls tools well.  The caller's keys reach the conversation either way."""
    transfer_targets: str = ""
    """Where ``transfer_call`` may send a caller, by name: ``sales=+15551234567,desk=sip:desk@pbx.example``.
    Only these: the model picks a name, never a number, so a caller cannot talk it into dialling
    one of theirs.  Empty: no transfers."""
    dtmf_gap_ms: int = 2000
    """Keys the caller presses are collected until ``#`` or this long without another key, then
    given to the conversation as one user message ("The caller pressed 1 2 3 on the keypad.")."""
    echo_cancellation: str = "off"
    """Remove the agent's own voice from what a phone caller sends (SIP and Twilio calls): a
    speakerphone, or a line's echo, sends it back, and the agent would hear itself talk over its
    reply.  What was played is known (the SIP gateway's frames; for Twilio, a copy of its playout
    buffer), so WebRTC's echo canceller (AEC3, the ``livekit`` package) subtracts it, about 1.5 %
    of a core per call.  Each call's line is judged while the agent talks, by how what comes back
    correlates with what played: one that returns nothing (a handset) is then passed as it comes,
    so that the canceller, still learning, does not damp a caller who interrupts early
    (voiceagent/echo.py).  Off by default until it has passed the whole suite on as often as off
    (docs/telephony.md).  ``auto``: on where ``livekit`` is installed (``scripts/setup.sh``
    installs it); ``on``: start-up refuses without it; ``off``: what the caller sends reaches the
    conversation as it is."""

    def __post_init__(self) -> None:
        self.targets  # noqa: B018 - parsed once here, so a bad pair stops start-up
        _check(100 <= self.dtmf_gap_ms <= 30000, "phone.dtmf_gap_ms", "must be 100..30000")
        _check(self.echo_cancellation in ("auto", "on", "off"), "phone.echo_cancellation", "must be auto, on or off")

    @property
    def targets(self) -> dict[str, str]:
        """``transfer_targets`` as name → target (``+E164``, ``tel:`` or ``sip:``/``sips:`` URI)."""
        targets: dict[str, str] = {}
        for pair in (p.strip() for p in self.transfer_targets.split(",")):
            if not pair:
                continue
            name, sep, target = (part.strip() for part in pair.partition("="))
            _check(
                bool(sep) and _TARGET_NAME.fullmatch(name) is not None and _TARGET.fullmatch(target) is not None,
                "phone.transfer_targets",
                f"{pair!r} is not name=target (target: +15551234567, tel:+15551234567 or sip:user@host)",
            )
            targets[name] = target
        return targets


_TARGET_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_TARGET = re.compile(r"\+?[0-9]{3,15}|tel:\+?[0-9]{3,15}|sips?:[^\s<>\"@]+@[^\s<>\"]+")


@dataclass(frozen=True)
class GpuConfig:
    speech_vram_mb: int = 3072
    """GPU memory kept for the speech models on the device (Whisper, turn, TTS, their CUDA
    contexts): about 2.6 GiB measured on an H100 (docs/gpu_probe.md), plus a margin.  Start-up
    checks that this plus vLLM's share (``llm.gpu_memory_utilization``) is free."""

    def __post_init__(self) -> None:
        _check(self.speech_vram_mb >= 0, "gpu.speech_vram_mb", "must be >= 0")


@dataclass(frozen=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    stt: SttConfig = field(default_factory=SttConfig)
    turn: TurnConfig = field(default_factory=TurnConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    playout: PlayoutConfig = field(default_factory=PlayoutConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    phone: PhoneConfig = field(default_factory=PhoneConfig)
    profile: str = "auto"
    """A named set of settings (voiceagent.config.profiles): ``fast``, ``balanced`` or ``quality`` (the
    CPU stack's models, from quickest to best answers) or ``gpu``.  ``auto``: at start-up, the most
    accurate installed CPU profile whose measured turn fits ``server.turn_budget_ms``
    (:mod:`voiceagent.backends.auto_profile`); until then, and wherever nothing is started, the defaults.
    Empty: the defaults (the same models as ``fast``).  Settings given in the file, the
    environment or flags win over the profile's."""
    cache_dir: str = "~/.cache/voiceagent"
    log_level: str = "info"
    log_format: str = "text"
    """``text`` (one human-readable line per record) or ``json`` (one JSON object per line)."""
    log_transcripts: bool = False
    """Write what the caller and the agent said to the log (off: transcripts are private)."""

    def __post_init__(self) -> None:
        _check(
            self.log_level in ("debug", "info", "warning", "error"),
            "log_level",
            "must be debug, info, warning or error",
        )
        _check(self.log_format in ("text", "json"), "log_format", "must be text or json")
        from voiceagent.config.profiles import PROFILES  # the profiles name config keys: imported late

        names = ", ".join(["auto", *sorted(PROFILES)])
        _check(self.profile in ("", "auto") or self.profile in PROFILES, "profile", f"must be one of: {names} (or empty)")

    @property
    def cache_path(self) -> Path:
        return Path(os.path.expanduser(self.cache_dir))

    @property
    def startup_lock_path(self) -> Path:
        """The directory of the start-up lock (``server.startup_lock_dir``, else ``cache_dir``)."""
        return Path(os.path.expanduser(self.server.startup_lock_dir)) if self.server.startup_lock_dir else self.cache_path
