"""Start-up check for the stages configured on CUDA: the device, the libraries' CUDA builds and
the memory budget, before any model is loaded.

Each failure is one :class:`~voiceagent.errors.ConfigError` line that names what is missing and
the fix, instead of an error deep inside a stage minutes later.  The probes (``nvidia-smi``,
onnxruntime's providers, CTranslate2's device count, vLLM's import) are injectable for tests.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from voiceagent.config import Config
from voiceagent.errors import ConfigError

__all__ = ["Gpu", "GpuProbes", "check_gpu", "cuda_stages", "onnx_providers", "query_gpus"]


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


@dataclass(frozen=True)
class GpuProbes:
    gpus: Callable[[], list[Gpu]] = query_gpus
    ort_providers: Callable[[], list[str]] = _ort_providers
    ct2_devices: Callable[[], int] = _ct2_devices
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
