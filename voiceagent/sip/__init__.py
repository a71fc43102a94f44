"""SIP calls answered by the server itself: a gateway process (PJSIP through ``pjsua2``) that
bridges each call to one session on the server's own loopback WebSocket.

Why a process of its own and why PJSIP: docs/decisions/sip-stack.md.  The pieces, leaves first:
:mod:`.allow` (who may call), :mod:`.playout` (the agent's audio queued for the call, and which
of it has played), :mod:`.bridge` (one call's WebSocket to the server), :mod:`.gateway` (PJSIP,
the process's main), :mod:`.supervisor` (``voiceagent serve``'s side: start it, restart it).
"""
