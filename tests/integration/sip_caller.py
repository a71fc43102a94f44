"""baresip (Debian's ``baresip-core``) as a real SIP caller for the tests: it plays a WAV into the
call (``aufile``), records what it hears (``sndfile``: ``dump-…-dec.wav`` in its folder) and takes
commands over ``ctrl_tcp`` (netstring JSON: dial, hangup).  Loopback only; no sound card (ALSA's
``null`` device plays what it receives into nothing)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import SCALE
from tests.ports import free_port
from voiceagent.audio import Int16Array, read_wav, resample, write_wav
from voiceagent.echo import echo_cancellation_on
from voiceagent.sip.supervisor import SipGateway
from voiceagent.transports.server import VoiceAgentServer

CODEC_RATES = {"PCMU": 8000, "PCMA": 8000, "G722": 16000}


def sip_api(server: VoiceAgentServer, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """A request to the server's HTTP API (POST with ``body``, else GET): status and JSON body
    (blocking: call it from a thread)."""
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def placed_record(server: VoiceAgentServer, call_id: str) -> dict[str, Any]:
    """A placed call's record, as ``GET /v1/sip/calls/{id}`` shows it."""
    return server.phone_calls.placed[call_id].as_object()


def gateway_for(
    server: VoiceAgentServer, sip_port: int, allow: str = "127.0.0.1", max_calls: int = 4, echo_cancellation: bool | None = None
) -> SipGateway:
    """The SIP gateway of ``server`` (not yet started), listening on loopback at ``sip_port``, and
    placing the server's calls as ``serve``'s does; ``echo_cancellation`` as the server's
    ``phone.echo_cancellation`` says unless given."""
    if echo_cancellation is None:
        echo_cancellation = echo_cancellation_on(server.config.phone.echo_cancellation)
    url = f"ws://127.0.0.1:{server.port}"
    gateway = SipGateway("127.0.0.1", sip_port, url, allow, max_calls, echo_cancellation=echo_cancellation)
    gateway.place_calls_for(server.phone_calls)
    return gateway


async def until_state(ready: Callable[[], bool], within_s: float, what: str, report: Callable[[], str] = str) -> None:
    """Wait for another process's state (a file, a session, baresip's log), polled on the event
    loop; ``within_s`` is a guard scaled for a loaded run.  ``report()`` is added to the failure:
    the other process's output at that moment."""
    deadline = time.monotonic() + within_s * SCALE
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s * SCALE:.0f} s: {what}\n{report()}")
        await asyncio.sleep(0.1)


# baresip's call status line, rewritten in place on a terminal and appended to a log.
_STATUS = re.compile(r"\[\d+:\d\d:\d\d\] audio=\d+/\d+ \(bit/s\)\s*")


class Baresip:
    """One baresip process with its own config folder under ``folder``."""

    def __init__(
        self,
        folder: Path,
        question: Path,
        codec: str = "PCMU",
        tail_s: float = 60.0,
        silent: bool = False,
        echo: bool = False,
        user: str = "caller",
        answer: str = "manual",
    ) -> None:
        self.folder = folder
        self.codec = codec
        self.rate = CODEC_RATES[codec]
        (folder / "rec").mkdir(parents=True, exist_ok=True)
        # aufile needs the codec's own rate; the question is followed by silence, for the turn to
        # end and the answer to be heard (baresip hangs up when its file ends).
        pcm, rate = read_wav(question)
        pcm = resample(pcm, rate, self.rate) if not silent else np.zeros(0, dtype=np.int16)  # silent: keys only
        write_wav(folder / "say.wav", np.concatenate([pcm, np.zeros(int(tail_s * self.rate), dtype=np.int16)]), self.rate)
        self.ctrl_port = free_port()
        self.sip_port = sip_port = free_port(span=2)  # SIP over TLS listens on the next port
        (folder / "config").write_text(
            "\n".join(
                [
                    "poll_method epoll",
                    f"sip_listen 127.0.0.1:{sip_port}",
                    "net_interface 127.0.0.1",
                    "audio_player aubridge,nil",
                    # echo: a speakerphone at its worst, sending back all it plays, as it plays it
                    # (baresip's audio bridge joins its player to its source).
                    "audio_source aubridge,nil" if echo else f"audio_source aufile,{folder / 'say.wav'}",
                    "module_path /usr/lib/baresip/modules",
                    # Only the codec asked for: the gateway then has no other to choose.
                    "module g722.so" if codec == "G722" else "module g711.so",
                    "module aufile.so",
                    "module sndfile.so",
                    "module aubridge.so",
                    "module_app account.so",
                    "module_app menu.so",
                    "module_app ctrl_tcp.so",
                    f"ctrl_tcp_listen 127.0.0.1:{self.ctrl_port}",
                    f"snd_path {folder / 'rec'}",
                    "",
                ]
            )
        )
        (folder / "accounts").write_text(f"<sip:{user}@127.0.0.1:{sip_port}>;regint=0;audio_codecs={codec};answermode={answer}\n")
        self.log = (folder / "baresip.log").open("w")
        # Line-buffered: its log is a file, which C buffers by the block, and a short call's last
        # lines ("... terminated") would wait there for lines that never come.
        self.proc = subprocess.Popen(["stdbuf", "-oL", "baresip", "-f", str(folder)], stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_for_ctrl()

    def _wait_for_ctrl(self, within_s: float = 20.0) -> None:
        deadline = time.monotonic() + within_s
        while True:  # its control port opens once it has loaded its modules
            try:
                socket.create_connection(("127.0.0.1", self.ctrl_port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"baresip did not start: {self.output()}") from None
                time.sleep(0.1)

    def command(self, name: str, params: str = "") -> None:
        body = json.dumps({"command": name, "params": params, "token": name}).encode()
        with socket.create_connection(("127.0.0.1", self.ctrl_port), timeout=5) as sock:
            sock.sendall(f"{len(body)}:".encode() + body + b",")
            sock.recv(4096)  # its answer: the command was taken

    def dial(self, uri: str) -> None:
        self.command("dial", uri)

    def hangup(self) -> None:
        self.command("hangup")

    def heard(self) -> Int16Array:
        """What it has received so far, at the codec's rate (the dump is written as it goes)."""
        return self._dump("dec")

    def sent(self) -> Int16Array:
        """What it has sent so far (its ``-enc`` dump), on the same clock as :meth:`heard`."""
        return self._dump("enc")

    def _dump(self, kind: str) -> Int16Array:
        dumps = sorted((self.folder / "rec").glob(f"dump-*-{kind}.wav"))
        if not dumps:
            return np.zeros(0, dtype=np.int16)
        raw = dumps[-1].read_bytes()[44:]  # the header's sizes are written only at the end
        return np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2").copy()

    def call_ended(self) -> bool:
        """Whether its call has ended: baresip says "session closed: …" at the other side's BYE
        (and "… terminated" at its menu's end of a call, not always printed)."""
        out = self.output()
        return "session closed" in out or "terminated" in out

    def output(self) -> str:
        """baresip's log without its status lines ("[0:00:12] audio=64000/64000 (bit/s)"), whole.

        Whole, because baresip prints a status line several times a second during a call: a tail
        of the raw log loses an event ("call: resume", "received event: '#'") within seconds, and a
        test polling under load can miss it.  The status lines are in :meth:`whole_output`."""
        return _STATUS.sub("", self.whole_output())

    def whole_output(self) -> str:
        self.log.flush()
        return (self.folder / "baresip.log").read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
