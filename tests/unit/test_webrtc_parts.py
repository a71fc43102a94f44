"""The pure parts of WebRTC calls: a POST's head on the WebSocket port, the offer's forms, and the
agent's track (its pacing on a virtual clock, and a barge-in's clear)."""

from __future__ import annotations

import asyncio
from fractions import Fraction

import numpy as np
import pytest

from voiceagent.clock import VirtualClock
from voiceagent.transports.http_post import _parse_head
from voiceagent.transports.server import _offer
from voiceagent.transports.webrtc import FRAME_SAMPLES, TRACK_RATE, SpeakerTrack, _ice_servers

SDP = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n"


def test_a_post_head_is_parsed_and_a_malformed_one_named() -> None:
    path, headers, error = _parse_head(b"POST /v1/realtime/calls?x=1 HTTP/1.1\r\nContent-Type: application/sdp\r\nContent-Length: 12")
    assert (path, headers["content-type"], headers["Content-Length"], error) == ("/v1/realtime/calls?x=1", "application/sdp", "12", None)
    assert _parse_head(b"POST nopath HTTP/1.1")[2] == "malformed request line"
    assert _parse_head(b"POST / HTTP/1.1\r\nno colon here")[2] == "malformed header line"
    assert _parse_head(b"POST / SPDY/3")[2] == "malformed request line"
    assert _parse_head(b"POST / HTTP/1.1\r\nX-Evil: a\x01b")[2] == "malformed header line"
    assert _parse_head(b"POST /\xff HTTP/1.1")[2] == "malformed request line"


def test_the_offer_comes_as_sdp_or_as_a_form_with_a_session() -> None:
    assert _offer("application/sdp", SDP.encode()) == (SDP, None)
    form = (
        f'--b\r\nContent-Disposition: form-data; name="sdp"\r\n\r\n{SDP}\r\n'
        '--b\r\nContent-Disposition: form-data; name="session"\r\n\r\n{"instructions": "Hi."}\r\n--b--\r\n'
    ).encode()
    sdp, session = _offer("multipart/form-data; boundary=b", form)
    assert sdp.replace("\r\n", "\n").strip() == SDP.replace("\r\n", "\n").strip() and session == {"instructions": "Hi."}


@pytest.mark.parametrize(
    ("content_type", "body", "why"),
    [
        ("text/plain", b"v=0", "application/sdp"),
        ("multipart/form-data; boundary=b", b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n1\r\n--b--\r\n', "no sdp field"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="sdp"\r\n\r\nv=0\r\n'
            b'--b\r\nContent-Disposition: form-data; name="session"\r\n\r\n{bad\r\n--b--\r\n',
            "not JSON",
        ),
    ],
)
def test_a_bad_offer_request_says_what_is_wrong(content_type: str, body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        _offer(content_type, body)


def test_ice_servers_are_parsed_with_their_credentials() -> None:
    stun, turn = _ice_servers("stun:stun.example.org:3478, turn:alice:s3cret@turn.example.org:3478")
    assert stun.urls == "stun:stun.example.org:3478" and stun.username is None
    assert (turn.urls, turn.username, turn.credential) == ("turn:turn.example.org:3478", "alice", "s3cret")
    assert _ice_servers("") == []


def test_the_agents_track_paces_20_ms_frames_and_a_clear_silences_it_at_once() -> None:
    clock = VirtualClock()

    async def main() -> None:
        track = SpeakerTrack(clock.now, clock.sleep_until)
        track.push(np.full(24_000 // 10, 8000, dtype=np.int16))  # 100 ms at the wire's 24 kHz
        pts, first = await track.next_chunk()
        assert pts == 0 and len(first) == FRAME_SAMPLES
        pending = asyncio.ensure_future(track.next_chunk())
        await asyncio.sleep(0)
        assert not pending.done(), "the second frame came before its 20 ms"
        clock.advance(0.02)
        pts, second = await asyncio.wait_for(pending, 5)
        assert pts == FRAME_SAMPLES and np.abs(second).max() > 1000
        track.clear()  # a barge-in: what is queued is dropped, and nothing more is sent
        assert track.queued_ms == 0
        after = asyncio.ensure_future(track.next_chunk())
        for _ in range(50):
            clock.advance(0.02)
            await asyncio.sleep(0)
        assert not after.done(), "a cleared track sent a frame"
        after.cancel()
        assert track.sent_audio_frames == 2

    asyncio.run(main())


def test_a_silent_track_sends_a_replys_first_audio_at_once_with_its_timestamp_moved_over_the_gap() -> None:
    clock = VirtualClock()

    async def main() -> None:
        track = SpeakerTrack(clock.now, clock.sleep_until)
        track.push(np.full(24_000 // 25, 8000, dtype=np.int16))  # 40 ms: two frames, at 0 and 20 ms
        assert (await track.next_chunk())[0] == 0
        clock.advance(0.02)
        assert (await track.next_chunk())[0] == FRAME_SAMPLES
        pending = asyncio.ensure_future(track.next_chunk())
        clock.advance(1.005)  # a second of silence: nothing is sent
        await asyncio.sleep(0)
        assert not pending.done(), "a silent track sent a frame"
        track.push(np.full(24_000 // 10, 8000, dtype=np.int16))  # at 1.025 s, the next reply
        pts, first = await asyncio.wait_for(pending, 5)  # the clock has not moved: no wait for a tick
        # The frame due at 40 ms goes at 1025 ms: 49 whole frames (985 ms) of silence skipped.
        assert pts == (2 + 49) * FRAME_SAMPLES and np.abs(first).max() > 1000
        after = asyncio.ensure_future(track.next_chunk())
        clock.advance(0.019)
        await asyncio.sleep(0)
        assert not after.done(), "the frame after the first came before 20 ms"
        clock.advance(0.0011)  # just past its tick (the clock's sums are floats)
        assert (await asyncio.wait_for(after, 5))[0] == (2 + 50) * FRAME_SAMPLES

    asyncio.run(main())


def test_a_clear_while_a_frame_waits_for_its_tick_sends_nothing_until_the_next_audio() -> None:
    clock = VirtualClock()

    async def main() -> None:
        track = SpeakerTrack(clock.now, clock.sleep_until)
        track.push(np.full(24_000 // 10, 8000, dtype=np.int16))
        await track.next_chunk()
        pending = asyncio.ensure_future(track.next_chunk())  # waiting for the 20 ms tick
        await asyncio.sleep(0)
        track.clear()  # a barge-in meanwhile
        clock.advance(0.02)
        await asyncio.sleep(0)
        assert not pending.done(), "a cleared track sent a frame at its tick"
        track.push(np.full(24_000 // 10, 8000, dtype=np.int16))
        _, chunk = await asyncio.wait_for(pending, 5)
        assert np.abs(chunk).max() > 1000 and track.sent_audio_frames == 2

    asyncio.run(main())


def test_a_cancelled_wait_of_a_silent_track_leaves_nothing_waiting() -> None:
    clock = VirtualClock()

    async def main() -> None:
        track = SpeakerTrack(clock.now, clock.sleep_until)
        pending = asyncio.ensure_future(track.next_chunk())
        await asyncio.sleep(0)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await asyncio.sleep(0)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        track.push(np.full(2400, 8000, dtype=np.int16))
        assert (await asyncio.wait_for(track.next_chunk(), 5))[0] == 0, "the track did not go on after a cancelled wait"

    asyncio.run(main())


def test_the_agents_packets_are_opus_that_decodes_to_the_pushed_audio_at_the_tracks_time() -> None:
    import av

    track = SpeakerTrack(VirtualClock().now, VirtualClock().sleep_until)
    tone = (np.sin(np.arange(FRAME_SAMPLES * 6) * 2 * np.pi * 440 / TRACK_RATE) * 8000).astype(np.int16)
    decoder = av.CodecContext.create("opus", "r")
    decoder.sample_rate, decoder.layout = TRACK_RATE, "mono"
    decoded = []
    for i in range(6):
        pts = 7 * FRAME_SAMPLES + i * FRAME_SAMPLES if i < 3 else 1000 * FRAME_SAMPLES + i * FRAME_SAMPLES  # a jump
        packet = track.encode(tone[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES], pts)
        assert packet.pts == pts and packet.time_base == Fraction(1, TRACK_RATE) and 0 < packet.size < 200
        decoded += [f.to_ndarray().ravel() for f in decoder.decode(packet)]
    level = np.abs(np.concatenate(decoded)[FRAME_SAMPLES:]).max() * 32768  # float samples
    assert len(decoded) == 6 and 6000 < level < 10000, level  # the tone through the codec: its level kept
    last = track.encode(tone[:100], 0)  # the end of a reply, shorter than a frame: padded, still one packet
    assert last.size > 0


def _rtp(seq: int) -> object:
    from aiortc.rtp import RtpPacket

    packet = RtpPacket(payload_type=111, sequence_number=seq, timestamp=960 * seq)
    packet._data = bytes([seq % 256])  # type: ignore[attr-defined]  # what the receiver's depayloader sets
    return packet


def test_the_microphones_jitter_buffer_decodes_a_packet_as_it_arrives_and_keeps_the_order() -> None:
    from aiortc.jitterbuffer import JitterBuffer

    from voiceagent.transports.webrtc import _audio_jitter_buffer

    buffer = _audio_jitter_buffer(16, 1)
    assert isinstance(buffer, JitterBuffer)
    out = [buffer.add(_rtp(seq))[1] for seq in (100, 101)]
    assert [(f.timestamp, f.data) for f in out] == [(96_000, b"d"), (96_960, b"e")], "a packet waited for the next one"
    assert buffer.add(_rtp(103))[1] is None, "a packet was decoded before the one missing ahead of it"
    frame = buffer.add(_rtp(102))[1]
    assert frame is not None and frame.timestamp == 960 * 102
    frame = buffer.add(_rtp(104))[1]
    assert frame is not None and frame.timestamp == 960 * 103  # in order: 103 first, 104 stays
    # 105 lost: 106 hands on 104, which waited; 106 and 107 wait for 105; the third after it
    # gives it up, and of the three waiting the oldest is dropped so that one packet (20 ms), not
    # three, stays behind.
    frame = buffer.add(_rtp(106))[1]
    assert frame is not None and frame.timestamp == 960 * 104
    assert buffer.add(_rtp(107))[1] is None
    frame = buffer.add(_rtp(108))[1]
    assert frame is not None and frame.timestamp == 960 * 107
    frame = buffer.add(_rtp(109))[1]
    assert frame is not None and frame.timestamp == 960 * 108
    held = _audio_jitter_buffer(16, 2)
    assert held.add(_rtp(7))[1] is None
    frame = held.add(_rtp(8))[1]
    assert frame is not None and frame.timestamp == 960 * 7
