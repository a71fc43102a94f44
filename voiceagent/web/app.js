// The voiceagent browser client: microphone → OpenAI Realtime protocol → speaker.
//
// Transport: WebRTC where the browser has it (POST /v1/realtime/calls with an SDP offer, as
// OpenAI's browser SDKs do): the microphone goes on a media track with the browser's own echo
// cancellation, the agent's voice comes back on the server's track (the server paces it and
// empties it on a barge-in: nothing to clear or truncate here), every other event on the
// "oai-events" data channel.  When WebRTC cannot be set up the page falls back to the WebSocket
// path below (?transport=websocket asks for it; ?transport=webrtc forbids the fallback).
//
// WebSocket audio: the microphone runs through an AudioWorklet (pcm-capture) that yields 24 kHz mono int16
// in 20 ms chunks, sent as input_audio_buffer.append.  Reply audio (response.output_audio.delta,
// 24 kHz int16) goes to a second worklet (pcm-player) that plays the chunks back to back, so they
// are gapless however they arrive, and counts the samples it really played.
//
// Barge-in: on input_audio_buffer.speech_started the player's queue is dropped at once and the
// page sends conversation.item.truncate with the milliseconds of that item actually played, so
// the server's history holds only what the user heard.
//
// Query parameters: ?transport=webrtc|websocket, ?ws=URL (another server), ?capture=native (capture at the device rate and
// resample in the worklet, as Firefox must).  window.voiceagent exposes counters for tests.

const WIRE_RATE = 24000;
const params = new URLSearchParams(location.search);
const defaultUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime?voiceagent_metrics=1`;
const wsUrl = params.get("ws") || defaultUrl;
// A server on a public address needs a token.  Browsers cannot set an Authorization header, so
// it travels as the subprotocol "openai-insecure-api-key.<token>" (as with OpenAI's Realtime
// API).  It comes from the page's #token=… (what `voiceagent serve` prints), else the field, and
// is kept in this browser's localStorage; the fragment never reaches the server's logs.
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (hashToken) localStorage.setItem("voiceagent.token", hashToken);
const nativeCapture = params.get("capture") === "native";
const transportParam = params.get("transport");
const callsUrl = `${location.protocol}//${location.host}/v1/realtime/calls?voiceagent_metrics=1`;

const stats = {
  state: "idle",
  sentMs: 0, // microphone audio sent
  receivedMs: 0, // reply audio received
  playedMs: 0, // reply audio the player actually played
  responses: 0,
  user: [], // final user transcripts
  assistant: [], // {item_id, status, text} per finished response
  truncates: [], // {item_id, audio_end_ms} sent on barge-in
  truncated: [], // {item_id, audio_end_ms} the server confirmed (conversation.item.truncated)
  metrics: [], // voiceagent.turn_metrics spans, one per turn
  errors: [],
  transport: null, // "webrtc" or "websocket", once connected
  fallback: null, // why WebRTC was not used, when the page fell back to the WebSocket
  cleared: 0, // output_audio_buffer.cleared events (barge-ins the server stopped)
};
window.voiceagent = stats;
// For diagnostics (and tests): the audio contexts' state and clocks.
stats.audio = () => ({
  context: ctx && { state: ctx.state, time: ctx.currentTime, rate: ctx.sampleRate, outputLatency: ctx.outputLatency },
  capture: captureCtx && { state: captureCtx.state, time: captureCtx.currentTime, rate: captureCtx.sampleRate },
  track: stream && stream.getAudioTracks().map((t) => ({ label: t.label, state: t.readyState, enabled: t.enabled, settings: t.getSettings() })),
});
// WebRTC: what the agent's track brought (the browser's own count of received audio).
stats.received = async () => {
  if (!pc) return null;
  const out = { samples: 0, energy: 0, duration: 0 };
  (await pc.getStats()).forEach((r) => {
    if (r.type === "inbound-rtp" && r.kind === "audio") {
      out.samples += r.totalSamplesReceived || 0;
      out.energy += r.totalAudioEnergy || 0;
      out.duration += r.totalSamplesDuration || 0;
    }
  });
  return out;
};

const $ = (id) => document.getElementById(id);
let ws = null;
let pc = null; // WebRTC: the peer connection, its data channel and the agent's audio element
let dc = null;
let remoteAudio = null;
let meterTimer = null;
let ctx = null;
let captureCtx = null;
let stream = null;
let player = null;
let capture = null;
let muted = false;
let stopping = false;
let speechStoppedAt = null;
let audioItem = null; // the assistant item whose audio is arriving
const turns = new Map(); // item id → {el, text}
const cutItems = new Set(); // assistant items whose playback was stopped: late audio is dropped
const firstAudio = new Set();
const responseItems = new Map(); // response id → assistant item id
const playedSamples = {};

// --------------------------------------------------------------------------- page state

function setState(state, detail) {
  stats.state = state;
  const el = $("status");
  el.textContent = detail ? `${state} — ${detail}` : state;
  el.className = `status ${state}`;
}

function showError(message) {
  stats.errors.push(message);
  const el = $("error");
  el.textContent = message;
  el.hidden = false;
}

function turn(itemId, role) {
  let t = turns.get(itemId);
  if (!t) {
    const el = document.createElement("div");
    el.className = `turn ${role} partial`;
    el.dataset.item = itemId;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "you" : "agent";
    const text = document.createElement("span");
    text.className = "text";
    el.append(who, text);
    $("transcript").append(el);
    t = { el, text, role };
    turns.set(itemId, t);
  }
  return t;
}

function setText(itemId, role, text, final) {
  const t = turn(itemId, role);
  t.text.textContent = text;
  t.el.classList.toggle("partial", !final);
  t.el.scrollIntoView({ block: "end" });
}

function note(itemId, text, kind = "note") {
  const t = turns.get(itemId);
  if (!t) return;
  let n = t.el.querySelector(`.${kind}`);
  if (!n) {
    n = document.createElement("span");
    n.className = `note ${kind}`;
    t.el.append(n);
  }
  n.textContent = text;
}

function buttons(running) {
  $("start").disabled = running;
  $("mute").disabled = !running;
  $("stop").disabled = !running;
}

// --------------------------------------------------------------------------- audio

function toBase64(int16) {
  const bytes = new Uint8Array(int16.buffer, int16.byteOffset, int16.byteLength);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

function pcm16ToFloat(b64) {
  const bin = atob(b64);
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const out = new Float32Array(bin.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

async function openMicrophone() {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw new Error("microphone access needs a secure page: open it over https:// or http://localhost");
  }
  stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
}

function startMeter() {
  // WebRTC sends the track itself: the level meter reads it through an analyser.
  const meterCtx = new AudioContext();
  const analyser = meterCtx.createAnalyser();
  meterCtx.createMediaStreamSource(stream).connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  meterTimer = setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (let i = 0; i < buf.length; i += 4) sum += buf[i] ** 2;
    $("level").style.width = `${Math.min(100, Math.sqrt(sum / (buf.length / 4)) * 400)}%`;
  }, 50);
  captureCtx = meterCtx;
}

async function openAudio() {
  ctx = new AudioContext({ sampleRate: WIRE_RATE, latencyHint: "interactive" });
  await ctx.audioWorklet.addModule("audio-worklets.js");
  player = new AudioWorkletNode(ctx, "pcm-player", { numberOfInputs: 0, outputChannelCount: [1] });
  player.port.onmessage = (e) => onPlayer(e.data);
  player.connect(ctx.destination);

  let source = null;
  let cctx = ctx;
  if (!nativeCapture) {
    try {
      source = ctx.createMediaStreamSource(stream);
    } catch (err) {
      source = null; // this browser cannot feed a 24 kHz context from the microphone
    }
  }
  if (!source) {
    captureCtx = new AudioContext({ latencyHint: "interactive" });
    await captureCtx.audioWorklet.addModule("audio-worklets.js");
    cctx = captureCtx;
    source = captureCtx.createMediaStreamSource(stream);
  }
  capture = new AudioWorkletNode(cctx, "pcm-capture", { processorOptions: { chunkMs: 20 } });
  capture.port.onmessage = (e) => onCapture(e.data);
  capture.onprocessorerror = () => showError("the microphone worklet failed");
  player.onprocessorerror = () => showError("the playback worklet failed");
  source.connect(capture);
  // Chrome only runs nodes that lead to the destination; the capture node outputs silence.
  capture.connect(cctx.destination);
  await ctx.resume();
  if (captureCtx) await captureCtx.resume();
}

function onCapture(pcm) {
  let sum = 0;
  for (let i = 0; i < pcm.length; i += 4) sum += (pcm[i] / 32768) ** 2;
  $("level").style.width = `${Math.min(100, Math.sqrt(sum / (pcm.length / 4)) * 400)}%`;
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(pcm) }));
  stats.sentMs += (pcm.length * 1000) / WIRE_RATE;
}

function play(itemId, b64) {
  if (cutItems.has(itemId)) return; // in flight when the user interrupted: never to be heard
  const samples = pcm16ToFloat(b64);
  audioItem = itemId;
  stats.receivedMs += (samples.length * 1000) / WIRE_RATE;
  player.port.postMessage({ type: "audio", item: itemId, samples }, [samples.buffer]);
}

function onPlayer(msg) {
  if (msg.type === "position") {
    Object.assign(playedSamples, msg.played);
    stats.playedMs = (Object.values(playedSamples).reduce((a, b) => a + b, 0) * 1000) / WIRE_RATE;
  } else if (msg.type === "cleared") {
    // What left the player minus what is still in the output device's buffer was heard.
    const latencyMs = ((ctx && ctx.outputLatency) || 0) * 1000;
    for (const [itemId, samples] of Object.entries(msg.played)) {
      const audioEndMs = Math.max(0, Math.floor((samples * 1000) / WIRE_RATE - latencyMs));
      send({ type: "conversation.item.truncate", item_id: itemId, content_index: 0, audio_end_ms: audioEndMs });
      stats.truncates.push({ item_id: itemId, audio_end_ms: audioEndMs });
      note(itemId, `interrupted after ${(audioEndMs / 1000).toFixed(1)} s`, "cutnote");
    }
  }
}

function bargeIn() {
  // Stop at once; the player answers with how much of each dropped item it had played.  (Over
  // WebRTC the server empties its own track: there is no player here.)
  if (transport() === "webrtc") return;
  if (audioItem) cutItems.add(audioItem);
  if (player) player.port.postMessage({ type: "clear" });
}

// --------------------------------------------------------------------------- protocol

function transport() {
  return stats.transport;
}

function send(message) {
  if (dc && dc.readyState === "open") dc.send(JSON.stringify(message));
  else if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
}

function showLatency(clientMs, spans) {
  if (spans && spans.first_audio_sent !== undefined) {
    $("latency").textContent = `${Math.round(spans.first_audio_sent)} ms`;
    const parts = [];
    for (const [k, label] of [["transcript_final", "transcript"], ["turn_confirmed", "turn"], ["llm_first_token", "LLM"], ["tts_first_audio", "TTS"]]) {
      if (spans[k] !== undefined) parts.push(`${label} ${Math.round(spans[k])}`);
    }
    $("latency-detail").textContent = `end of speech → first audio (server); ${parts.join(" · ")} ms`;
  } else if (clientMs !== null) {
    $("latency").textContent = `${Math.round(clientMs)} ms`;
    $("latency-detail").textContent = "end of turn → first audio (this page)";
  }
}

function onServer(msg) {
  switch (msg.type) {
    case "session.created":
      setState("connected");
      buttons(true);
      break;
    case "input_audio_buffer.speech_started":
      bargeIn();
      setText(msg.item_id, "user", "…", false);
      break;
    case "input_audio_buffer.speech_stopped":
      speechStoppedAt = performance.now();
      break;
    case "conversation.item.input_audio_transcription.delta": {
      const t = turn(msg.item_id, "user");
      const prev = t.text.textContent === "…" ? "" : t.text.textContent;
      setText(msg.item_id, "user", prev + msg.delta, false);
      break;
    }
    case "conversation.item.input_audio_transcription.completed":
      stats.user.push(msg.transcript);
      setText(msg.item_id, "user", msg.transcript || "(nothing heard)", true);
      break;
    case "response.created":
      stats.responses += 1;
      break;
    case "response.output_audio_transcript.delta":
    case "response.audio_transcript.delta": {
      const t = turn(msg.item_id, "assistant");
      setText(msg.item_id, "assistant", t.text.textContent + msg.delta, false);
      break;
    }
    case "output_audio_buffer.started":
      if (transport() === "webrtc" && !firstAudio.has(msg.response_id)) {
        firstAudio.add(msg.response_id);
        if (speechStoppedAt !== null) showLatency(performance.now() - speechStoppedAt, null);
      }
      break;
    case "output_audio_buffer.cleared":
      stats.cleared += 1;
      break;
    case "response.output_audio.delta":
    case "response.audio.delta":
      if (!firstAudio.has(msg.response_id)) {
        firstAudio.add(msg.response_id);
        if (speechStoppedAt !== null) showLatency(performance.now() - speechStoppedAt, null);
      }
      play(msg.item_id, msg.delta);
      break;
    case "response.done": {
      const r = msg.response;
      const item = (r.output && r.output[0]) || null;
      const text = (item && item.content && item.content[0] && item.content[0].transcript) || "";
      if (item) {
        responseItems.set(r.id, item.id);
        stats.assistant.push({ item_id: item.id, status: r.status, text });
        const t = turns.get(item.id);
        const full = t ? t.text.textContent : "";
        setText(item.id, "assistant", text, true);
        if (r.status === "cancelled" && full.length > text.length && t) {
          const cut = document.createElement("span");
          cut.className = "cut";
          cut.textContent = ` ${full.slice(text.length).trim()}`;
          t.text.append(cut);
        }
      }
      break;
    }
    case "conversation.item.truncated":
      stats.truncated.push({ item_id: msg.item_id, audio_end_ms: msg.audio_end_ms });
      note(msg.item_id, `interrupted after ${(msg.audio_end_ms / 1000).toFixed(1)} s`, "cutnote");
      break;
    case "voiceagent.turn_metrics":
      stats.metrics.push(msg.spans_ms);
      showLatency(null, msg.spans_ms);
      if (msg.spans_ms.first_audio_sent !== undefined && responseItems.has(msg.response_id)) {
        note(responseItems.get(msg.response_id), `${Math.round(msg.spans_ms.first_audio_sent)} ms`, "lat");
      }
      break;
    case "error":
      showError(`server error ${msg.error.code}: ${msg.error.message}`);
      break;
    default:
      break;
  }
}

function iceGathered(peer, ms) {
  // The server takes one offer with every candidate in it (no trickle).
  if (peer.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => peer.iceGatheringState === "complete" && resolve();
    peer.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, ms);
  });
}

async function connectWebRtc() {
  const token = document.getElementById("token").value.trim();
  if (token) localStorage.setItem("voiceagent.token", token);
  $("server").textContent = `· ${callsUrl} (WebRTC)`;
  pc = new RTCPeerConnection();
  stream.getAudioTracks().forEach((t) => pc.addTrack(t, stream));
  dc = pc.createDataChannel("oai-events");
  remoteAudio = document.createElement("audio");
  remoteAudio.autoplay = true;
  pc.ontrack = (e) => {
    remoteAudio.srcObject = e.streams[0] || new MediaStream([e.track]);
    remoteAudio.play().catch(() => {});
  };
  dc.onmessage = (e) => {
    try {
      onServer(JSON.parse(e.data));
    } catch (err) {
      showError(`bad message from server: ${err.message}`);
    }
  };
  const opened = new Promise((resolve, reject) => {
    dc.onopen = resolve;
    setTimeout(() => reject(new Error("the WebRTC connection did not open in 10 s")), 10000);
  });
  await pc.setLocalDescription(await pc.createOffer());
  await iceGathered(pc, 3000);
  const headers = { "Content-Type": "application/sdp" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const resp = await fetch(callsUrl, { method: "POST", headers, body: pc.localDescription.sdp });
  const body = await resp.text();
  if (resp.status !== 201) throw new Error(`the server refused the call: ${resp.status} ${body.trim()}`);
  await pc.setRemoteDescription({ type: "answer", sdp: body });
  await opened;
  stats.transport = "webrtc";
  pc.onconnectionstatechange = () => {
    if (!stopping && pc && (pc.connectionState === "failed" || pc.connectionState === "closed")) {
      setState("error", `call ${pc.connectionState}`);
      showError(`the WebRTC call ${pc.connectionState}`);
      teardown();
    }
  };
  dc.onclose = () => {
    if (!stopping) {
      setState("error", "call ended");
      teardown();
    }
  };
}

function closeWebRtc() {
  if (dc) dc.onclose = null;
  if (pc) {
    pc.onconnectionstatechange = null;
    pc.close();
  }
  if (remoteAudio) remoteAudio.srcObject = null;
  pc = dc = remoteAudio = null;
}

function connect() {
  stats.transport = "websocket";
  return new Promise((resolve, reject) => {
    const token = document.getElementById("token").value.trim();
    if (token) localStorage.setItem("voiceagent.token", token);
    ws = token ? new WebSocket(wsUrl, ["realtime", `openai-insecure-api-key.${token}`]) : new WebSocket(wsUrl);
    $("server").textContent = `· ${wsUrl}`;
    ws.onopen = () => {
      send({
        type: "session.update",
        session: {
          type: "realtime",
          audio: { input: { format: { type: "audio/pcm", rate: WIRE_RATE } }, output: { format: { type: "audio/pcm", rate: WIRE_RATE } } },
        },
      });
      resolve();
    };
    ws.onmessage = (e) => {
      try {
        onServer(JSON.parse(e.data));
      } catch (err) {
        showError(`bad message from server: ${err.message}`);
      }
    };
    ws.onerror = () => reject(new Error(`cannot connect to ${wsUrl} (if the server needs a token, enter it above)`));
    ws.onclose = (e) => {
      if (!stopping) {
        setState("error", `connection closed (code ${e.code}${e.reason ? `: ${e.reason}` : ""})`);
        showError(`connection to ${wsUrl} closed (code ${e.code}${e.reason ? `: ${e.reason}` : ""})`);
        teardown();
      }
    };
  });
}

// --------------------------------------------------------------------------- buttons

async function start() {
  stopping = false;
  $("error").hidden = true;
  $("start").disabled = true;
  setState("connecting");
  try {
    await openMicrophone();
    let rtc = transportParam !== "websocket" && typeof RTCPeerConnection !== "undefined";
    if (rtc) {
      try {
        await connectWebRtc();
        startMeter();
      } catch (err) {
        closeWebRtc();
        if (transportParam === "webrtc") throw err;
        stats.fallback = err.message;
        rtc = false;
      }
    } else if (transportParam !== "websocket") {
      stats.fallback = "this browser has no WebRTC";
    }
    if (!rtc) {
      await openAudio();
      await connect();
    }
  } catch (err) {
    setState("error", err.message);
    showError(`${err.name && err.name !== "Error" ? `${err.name}: ` : ""}${err.message}`);
    stopping = true;
    teardown();
  }
}

function stop() {
  stopping = true;
  if (ws) ws.close(1000, "user stopped");
  closeWebRtc();
  teardown();
  setState("closed", "stopped");
}

function teardown() {
  closeWebRtc();
  if (meterTimer) clearInterval(meterTimer);
  meterTimer = null;
  if (stream) stream.getTracks().forEach((t) => t.stop());
  if (ctx) ctx.close();
  if (captureCtx) captureCtx.close();
  stream = ctx = captureCtx = player = capture = null;
  ws = null;
  muted = false;
  $("mute").textContent = "Mute";
  $("mute").setAttribute("aria-pressed", "false");
  $("level").style.width = "0";
  buttons(false);
}

function toggleMute() {
  muted = !muted;
  // A disabled track yields silence, which is still sent: the server's clock of the input stays
  // in step and a turn in progress ends normally.
  if (stream) stream.getAudioTracks().forEach((t) => (t.enabled = !muted));
  $("mute").textContent = muted ? "Unmute" : "Mute";
  $("mute").setAttribute("aria-pressed", String(muted));
}

$("start").addEventListener("click", start);
$("stop").addEventListener("click", stop);
$("mute").addEventListener("click", toggleMute);
$("server").textContent = `· ${wsUrl}`;
$("token").value = localStorage.getItem("voiceagent.token") || "";
