"""A speakerphone for the SIP tests: a phone whose microphone hears its own loudspeaker.

It dials a SIP URI and sends back everything it hears, ``--echo-db`` under what it heard (PJSIP's
conference bridge connects the call's audio to itself, as ``pjsua --auto-loop`` does: the echo
comes back a few 20 ms frames late, with no room response), and records what it hears to
``--record``.  Run as its own process (PJSIP allows one endpoint per process, and the gateway
under test has its own)::

    python -m tests.integration.speakerphone --to sip:agent@127.0.0.1:5060 --port 17000 --record heard.wav

It prints ``established`` once the call is up and ``ended`` when it is over, then exits; SIGTERM
hangs up first.  baresip's own audio bridge would be the simpler phone, but in Debian's baresip 1.0
its source sends nothing (the encoder's dump stays empty), so this one is built on the PJSIP the
gateway already needs.
"""

from __future__ import annotations

import argparse
import signal
import threading

import pjsua2 as pj

RATE = 16000
"""The conference bridge's rate, and so the recording's."""


class Phone(pj.Call):  # type: ignore[misc]
    def __init__(self, account: pj.Account, gain: float, record: str) -> None:
        super().__init__(account)
        self.gain = gain
        self.record = record
        self.recorder: pj.AudioMediaRecorder | None = None
        self.ended = threading.Event()

    def onCallState(self, prm: object) -> None:  # noqa: N802 - PJSIP's name
        state = self.getInfo().state
        if state == pj.PJSIP_INV_STATE_CONFIRMED:
            print("established", flush=True)
        elif state == pj.PJSIP_INV_STATE_DISCONNECTED:
            self.ended.set()

    def onCallMediaState(self, prm: object) -> None:  # noqa: N802 - PJSIP's name
        info = self.getInfo()
        for media in info.media:
            if media.type == pj.PJMEDIA_TYPE_AUDIO and media.status == pj.PJSUA_CALL_MEDIA_ACTIVE:
                audio = self.getAudioMedia(media.index)
                audio.adjustTxLevel(self.gain)  # what the "microphone" sends is the loudspeaker, quieter
                audio.startTransmit(audio)  # the loudspeaker heard by the microphone
                if self.recorder is None:
                    self.recorder = pj.AudioMediaRecorder()
                    self.recorder.createRecorder(self.record)
                audio.startTransmit(self.recorder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--to", required=True, help="the SIP URI to dial")
    ap.add_argument("--port", type=int, required=True, help="this phone's SIP port (UDP, loopback)")
    ap.add_argument("--echo-db", type=float, default=-6.0, help="the echo's level against what was heard")
    ap.add_argument("--record", required=True, help="a WAV file of what the phone hears")
    args = ap.parse_args()

    ep = pj.Endpoint()
    ep.libCreate()
    cfg = pj.EpConfig()
    cfg.uaConfig.threadCnt = 0
    cfg.logConfig.level = 1
    cfg.logConfig.consoleLevel = 1
    cfg.medConfig.noVad = True
    cfg.medConfig.clockRate = RATE
    cfg.medConfig.sndClockRate = RATE
    ep.libInit(cfg)
    ep.audDevManager().setNullDev()  # no sound card: the conference bridge's clock still runs
    for codec in ep.codecEnum2():  # PCMU only: the phone line the other SIP tests use most
        ep.codecSetPriority(codec.codecId, 255 if codec.codecId.startswith("PCMU/8000") else 0)
    tcfg = pj.TransportConfig()
    tcfg.port = args.port
    tcfg.boundAddress = "127.0.0.1"
    ep.transportCreate(pj.PJSIP_TRANSPORT_UDP, tcfg)
    ep.libStart()
    account = pj.Account()
    acfg = pj.AccountConfig()
    acfg.idUri = f"sip:phone@127.0.0.1:{args.port}"
    account.create(acfg)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    call = Phone(account, 10 ** (args.echo_db / 20), args.record)
    call.makeCall(args.to, pj.CallOpParam(True))
    hung_up = False
    while not call.ended.is_set():
        ep.libHandleEvents(10)
        if stop.is_set() and not hung_up:
            hung_up = True
            call.hangup(pj.CallOpParam(True))
    print("ended", flush=True)
    call.recorder = None
    del call
    account.shutdown()
    del account
    ep.libDestroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
