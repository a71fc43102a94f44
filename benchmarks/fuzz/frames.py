"""Raw WebSocket frames: a client's built by hand (so that they can be wrong), the server's read
back, its close code; and the hand-made JSON and audio payloads the hostile messages carry."""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import struct
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection


def ws_frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True, rsv: int = 0, declared: int | None = None) -> bytes:
    """One RFC 6455 frame as a client sends it (masked), built by hand so that it can be wrong:
    reserved bits, unknown opcodes, an unmasked frame, or a ``declared`` length longer than the
    payload that follows (a frame cut off in the middle)."""
    length = len(payload) if declared is None else declared
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mask_bit = 0x80 if masked else 0
    if length < 126:
        head += bytes([mask_bit | length])
    elif length < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", length)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", length)
    if not masked:
        return head + payload
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + body


RAW = "\u0000raw\u0000"
_EDGE = itertools.count()


def edge_depth() -> int:
    """Nesting depths around Python's recursion limit (1000), one after the other."""
    return 850 + next(_EDGE) % 151


def raw(msg: dict[str, Any], token: str) -> str:
    """``msg`` as JSON with the string ``RAW`` replaced by ``token`` verbatim (JSON the encoder
    would never write: 1e400, NaN, escapes of lone surrogates, nesting past the parser's limit)."""
    return json.dumps(msg).replace(json.dumps(RAW), token)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pcm_b64(samples: int, rng: random.Random, amplitude: int = 30) -> str:
    """Quiet noise (far below speech: VAD keeps still) as base64 16-bit PCM."""
    noise = np.array([rng.randint(-amplitude, amplitude) for _ in range(min(samples, 64))], dtype="<i2")
    return b64(np.resize(noise, samples).astype("<i2").tobytes())


def server_json(raw: str | bytes) -> dict[str, Any]:
    """One server message; anything but a JSON object is recorded as such (and checked by no one)."""
    try:
        msg = json.loads(raw)
    except ValueError:
        return {"type": "fuzz.not_json", "raw": repr(raw[:200])}
    return msg if isinstance(msg, dict) else {"type": "fuzz.not_an_object"}


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of the unmasked frames in ``data`` (what a server sends)."""
    out = []
    i = 0
    while i + 2 <= len(data):
        opcode, length = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if length == 126:
            (length,) = struct.unpack("!H", data[i : i + 2])
            i += 2
        elif length == 127:
            (length,) = struct.unpack("!Q", data[i : i + 8])
            i += 8
        out.append((opcode, data[i : i + length]))
        i += length
    return out


def close_code(ws: ClientConnection) -> int | None:
    """The code of the close frame the server sent (None: it sent none)."""
    rcvd = ws.protocol.close_rcvd
    return rcvd.code if rcvd is not None else None
