"""Start-up check for the stages configured on CUDA: the device, the libraries' CUDA builds and
the memory budget, before any model is loaded.

Each failure is one :class:`~voiceagent.errors.ConfigError` line that names what is missing and
the fix, instead of an error deep inside a stage minutes later.  The probes (``nvidia-smi``,
onnxruntime's providers, CTranslate2's device count and the cuBLAS it loads, vLLM's import) are
injectable for tests.
"""

from __future__ import annotations

import ctypes
import importlib.util
import mmap
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from voiceagent.config import Config
from voiceagent.errors import ConfigError

__all__ = ["Gpu", "GpuProbes", "check_gpu", "ct2_cublas_missing", "cuda_stages", "onnx_providers", "query_gpus"]


@dataclass(frozen=True)
class Gpu:
    name: str
    total_mb: int
    free_mb: int


def query_gpus() -> list[Gpu]:
    """The NVIDIA GPUs that ``nvidia-smi`` reports (none when it is missing or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            gpus.append(Gpu(parts[0], int(parts[1]), int(parts[2])))
    return gpus


def _ort_providers() -> list[str]:
    try:
        import onnxruntime as ort
    except ModuleNotFoundError:
        return []
    return list(ort.get_available_providers())


def _ct2_devices() -> int:
    try:
        import ctranslate2
    except ModuleNotFoundError:
        return 0
    return int(ctranslate2.get_cuda_device_count())


_CUBLAS = re.compile(rb"libcublas\.so\.[0-9]+")


def ct2_cublas_missing() -> str | None:
    """The cuBLAS library CTranslate2 loads on its first CUDA decode (``libcublas.so.12`` for the
    PyPI wheels), if it cannot be loaded here; None when it can, or CTranslate2 names none.

    CTranslate2 opens cuBLAS by name only when it first decodes, so a CUDA 12 build on a CUDA 13
    machine sees the device, loads the model, then fails at the first user turn
    (docs/gpu_probe.md).  The name is read from its shared library and loaded the same way."""
    spec = importlib.util.find_spec("ctranslate2")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    for lib in sorted([*package.parent.glob("ctranslate2.libs/libctranslate2*"), *package.glob("libctranslate2*")]):
        with open(lib, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found = _CUBLAS.search(data)
            name = bytes(found.group()).decode() if found is not None else None
        if name is None:
            continue
        try:
            ctypes.CDLL(name)
        except OSError:
            return name
        return None
    return None


@dataclass(frozen=True)
class GpuProbes:
    gpus: Callable[[], list[Gpu]] = query_gpus
    ort_providers: Callable[[], list[str]] = _ort_providers
    ct2_devices: Callable[[], int] = _ct2_devices
    ct2_cublas_missing: Callable[[], str | None] = ct2_cublas_missing
    has_vllm: Callable[[], bool] = lambda: importlib.util.find_spec("vllm") is not None


def cuda_stages(config: Config) -> list[str]:
    """The stages configured on CUDA (vLLM counts when the LLM backend is ``vllm`` and the
    profile is ``gpu``: vLLM itself picks its device)."""
    stages = [name for name, device in (("vad", config.vad.device), ("stt", config.stt.device)) if device == "cuda"]
    stages += [name for name, device in (("turn", config.turn.device), ("tts", config.tts.device)) if device == "cuda"]
    if config.llm.backend == "vllm" and config.profile == "gpu":
        stages.append("llm")
    return stages


def check_gpu(config: Config, probes: GpuProbes | None = None) -> Gpu | None:
    """Check that the CUDA stages can run here (blocking; a second at most).  None when no stage
    is configured on CUDA; else the GPU, or :class:`ConfigError` with one line."""
    stages = cuda_stages(config)
    if not stages:
        return None
    probes = probes or GpuProbes()
    where = f"{', '.join(stages)} on cuda" + (" (profile gpu)" if config.profile == "gpu" else "")
    gpus = probes.gpus()
    if not gpus:
        raise ConfigError(f"{where} needs an NVIDIA GPU, and nvidia-smi finds none here; on a CPU, run without --profile gpu")
    gpu = gpus[0]
    onnx = [s for s in stages if s in ("vad", "turn", "tts")]
    if onnx and "CUDAExecutionProvider" not in probes.ort_providers():
        raise ConfigError(f"{', '.join(onnx)} on cuda needs onnxruntime's CUDA provider: install onnxruntime-gpu in place of onnxruntime")
    if "stt" in stages and probes.ct2_devices() < 1:
        raise ConfigError("stt on cuda needs a CTranslate2 built for this machine's CUDA (it sees no CUDA device); or set stt.device=cpu")
    if "stt" in stages and (cublas := probes.ct2_cublas_missing()) is not None:
        raise ConfigError(
            f"stt on cuda: CTranslate2 loads {cublas} at its first decode, and it cannot be loaded here (a CTranslate2 built for "
            f"another CUDA): install the matching cuBLAS (pip install nvidia-cublas-cu{cublas.rsplit('.', 1)[1]}, its lib folder on "
            "LD_LIBRARY_PATH) or a CTranslate2 built for this CUDA; or set stt.device=cpu"
        )
    if "llm" in stages and not probes.has_vllm():
        raise ConfigError("llm.backend=vllm needs vLLM: pip install vllm (or run bash scripts/setup_vllm.sh)")
    llm_mb = int(gpu.total_mb * config.llm.gpu_memory_utilization) if "llm" in stages else 0
    speech_mb = config.gpu.speech_vram_mb if any(s != "llm" for s in stages) else 0
    if llm_mb + speech_mb > gpu.free_mb:
        raise ConfigError(
            f"{where} needs {llm_mb + speech_mb} MiB of GPU memory ({speech_mb} for the speech models, {llm_mb} for vLLM at "
            f"llm.gpu_memory_utilization={config.llm.gpu_memory_utilization:g}); {gpu.name} has {gpu.free_mb} MiB free: "
            "lower llm.gpu_memory_utilization or free the GPU"
        )
    return gpu


def onnx_providers(device: str) -> Sequence[str | tuple[str, dict[str, str]]]:
    """onnxruntime execution providers for ``device``.  On CUDA, cuDNN picks convolution
    algorithms by heuristic: the exhaustive default re-searches for every new input length, which
    cost Piper ~850 ms per reply on an H100 against ~180 ms (docs/gpu_probe.md)."""
    if device == "cuda":
        return [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]
