// AudioWorklet processors of the voiceagent page.  They run on the browser's audio thread, so
// they never allocate more than they must and never block: data moves through MessagePorts.
//
//   pcm-capture  microphone → 24 kHz mono int16 chunks (posted to the page, which sends them)
//   pcm-player   24 kHz float chunks from the page → speaker, gapless; counts what it played

const WIRE_RATE = 24000;

// Band-limited resampling (windowed sinc, Blackman window) for when the capture context does not
// run at 24 kHz (Firefox cannot connect a microphone to a context at another rate).  Linear
// interpolation would fold everything above 12 kHz back into the speech band.
class SincResampler {
  constructor(inRate, outRate, zeros = 16) {
    this.step = inRate / outRate;
    this.fc = Math.min(1, outRate / inRate) * 0.95; // cutoff as a fraction of the input Nyquist
    this.half = Math.ceil(zeros / this.fc); // kernel half-width in input samples
    this.buf = new Float32Array(this.half); // history, starts as silence
    this.pos = this.half; // input position (in buf) of the next output sample
  }

  kernel(u) {
    const x = u / this.half;
    if (x <= -1 || x >= 1) return 0;
    const a = Math.PI * this.fc * u;
    const sinc = a === 0 ? 1 : Math.sin(a) / a;
    const w = 0.42 + 0.5 * Math.cos(Math.PI * x) + 0.08 * Math.cos(2 * Math.PI * x);
    return this.fc * sinc * w;
  }

  process(input) {
    const b = new Float32Array(this.buf.length + input.length);
    b.set(this.buf);
    b.set(input, this.buf.length);
    const out = [];
    while (this.pos + this.half < b.length) {
      const c = Math.floor(this.pos);
      let acc = 0;
      for (let k = c - this.half + 1; k <= c + this.half; k++) acc += b[k] * this.kernel(this.pos - k);
      out.push(acc);
      this.pos += this.step;
    }
    const drop = Math.max(0, Math.floor(this.pos) - this.half);
    this.buf = b.slice(drop);
    this.pos -= drop;
    return Float32Array.from(out);
  }
}

class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const chunkMs = (options.processorOptions && options.processorOptions.chunkMs) || 20;
    this.resampler = sampleRate === WIRE_RATE ? null : new SincResampler(sampleRate, WIRE_RATE);
    this.size = (WIRE_RATE * chunkMs) / 1000;
    this.chunk = new Int16Array(this.size);
    this.fill = 0;
  }

  push(samples) {
    for (let i = 0; i < samples.length; i++) {
      const s = Math.max(-1, Math.min(1, samples[i]));
      this.chunk[this.fill++] = s < 0 ? s * 32768 : s * 32767;
      if (this.fill === this.size) {
        const full = this.chunk;
        this.port.postMessage(full, [full.buffer]); // transferred: `full` is empty afterwards
        this.chunk = new Int16Array(this.size);
        this.fill = 0;
      }
    }
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel) this.push(this.resampler ? this.resampler.process(channel) : channel);
    return true;
  }
}

class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // {item, samples: Float32Array, at}
    this.played = {}; // item id → samples played
    this.lastReport = -1;
    this.dirty = false;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    if (msg.type === "audio") {
      this.queue.push({ item: msg.item, samples: msg.samples, at: 0 });
    } else if (msg.type === "clear") {
      // Barge-in: drop everything queued; report how much of each item was really played.
      const items = new Set(this.queue.map((q) => q.item));
      this.queue = [];
      const played = {};
      for (const item of items) played[item] = this.played[item] || 0;
      this.port.postMessage({ type: "cleared", played, id: msg.id });
    }
  }

  report(now) {
    this.port.postMessage({ type: "position", played: this.played, queued: this.queue.length });
    this.lastReport = now;
    this.dirty = false;
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let i = 0;
    let active = false;
    while (i < out.length && this.queue.length) {
      const head = this.queue[0];
      const n = Math.min(out.length - i, head.samples.length - head.at);
      out.set(head.samples.subarray(head.at, head.at + n), i);
      head.at += n;
      i += n;
      this.played[head.item] = (this.played[head.item] || 0) + n;
      active = true;
      if (head.at === head.samples.length) this.queue.shift();
    }
    out.fill(0, i); // an underrun plays silence, and silence is not counted as heard
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    // Position reports ~20 times a second while playing, and once when the queue runs dry.
    if (active && currentTime - this.lastReport >= 0.05) this.report(currentTime);
    else if (active) this.dirty = true;
    if (!this.queue.length && this.dirty) this.report(currentTime);
    return true;
  }
}

registerProcessor("pcm-capture", PcmCapture);
registerProcessor("pcm-player", PcmPlayer);
