"""Protocol fuzzer: hostile clients against a live server over loopback, a good session beside them.

Without ``--url`` the server is a real ``voiceagent serve`` child process on a free loopback port
(models loaded and warmed as in production).  A child process rather than a server in this
interpreter: the fuzzer's own CPU work does not run on the server's event loop or hold its GIL,
"never crashes" is the process still being alive at the end (and exiting 0 on SIGTERM), and its
log is scanned for tracebacks.  With ``--url ws://HOST:PORT`` a server already running is fuzzed;
it must admit ``--clients`` + 3 sessions at once (``server.max_sessions``; the fuzzer's own server
gets ``2 * clients + 2``: the capacity a small machine measures for itself is one session).

Running together:

* ``--clients`` hostile clients, each a loop of seeded scenarios (``--seed``), sending at most
  ``--rate`` frames a second between them (default 200: each about as chatty as a client
  streaming 20 ms audio chunks; 0: as fast as they can):
  - ``/v1/realtime`` batches of malformed, truncated, wrong-type, unknown-type, missing-field,
    huge-number, lone-surrogate, deeply nested (past and right at the parser's recursion limit),
    binary, invalid-value and out-of-order messages (commit of an empty buffer, truncate, delete
    or retrieve of items that do not exist, cancel with no response), some sent fragmented, some
    compressed (permessage-deflate), a few valid ones among them; then a sync message whose error
    marks that every earlier frame was answered, and an ending: a normal close, an abrupt TCP
    abort (between frames, in the middle of one, or before the answers came), a FIN without a
    close frame, an oversized message (> max_message_bytes: close 1009), invalid UTF-8 in a text
    frame (1007) or a frame that breaks RFC 6455 (1002);
  - audio appended faster than real time (the ``server.audio_burst_s`` limit);
  - slow readers: a tiny receive buffer, a long spoken reply asked for, bad messages flooded,
    nothing read, then gone;
  - ``/twilio`` calls that end with one bad frame of the same kinds, or out of order (media,
    dtmf or marks before ``start``, ``start`` twice, ``stop`` twice, another stream's id);
  - raw TCP: half an HTTP upgrade request then a stall or a drop, bad upgrade requests, garbage;
  - on each route, one stalled reader that completes the handshake and then never answers a
    ping (about ``ping_interval + ping_timeout``, 40-50 s, until the server ends it).
* a good Realtime session that speaks spoken-question fixtures at real-time pace, turn after turn,
  checking each transcript for the fixture's keywords and timing end of speech → first reply
  audio: ``--baseline-turns`` alone first, then under the hostile load;
* a prober that GETs ``/healthz`` every 100 ms and times the answers.

The hostile clients go on until ``--messages`` hostile messages have been sent *and* the good
session has done ``--min-turns`` turns under load (so every one of them is under load: the count
at the end is at least ``--messages``).  The good session and the prober run on an event loop of
their own in a second thread, so that a busy hostile loop does not delay their clocks.

Invariants (exit status 1 when one fails): no close code 1011 anywhere; the server process alive
and ``/healthz`` answering at the end (no traceback or ERROR in its log, and exit 0 on SIGTERM,
when the fuzzer started it); every bad Realtime message answered by an ``error`` event (matched by
the ``event_id`` it carried, counted for the ones whose ``event_id`` the server cannot read);
every bad Twilio frame answered by the close that protocol has instead (1008, 1003 binary, 1007,
1009, 1002); the audio burst limit applied; every good turn completed with its keywords in the
transcript; every ``/healthz`` probe answered.  ``--max-latency-ms`` and ``--max-healthz-ms`` add
bounds on the good session's p50 under load and on the slowest probe.

Output: one JSON report on stdout and in ``--out``/fuzz.json.

    .venv/bin/python -m benchmarks.fuzz                       # 10,000 messages, a server of its own
    .venv/bin/python -m benchmarks.fuzz --messages 600 --url ws://127.0.0.1:8765
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
"""The checkout (fixtures are made under its ``.cache``, reports go under its ``artifacts``)."""
