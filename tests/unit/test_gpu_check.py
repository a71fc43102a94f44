"""The start-up check of the stages configured on CUDA: one clear line for each missing piece."""

from __future__ import annotations

import pytest

from voiceagent.backends.gpu import Gpu, GpuProbes, check_gpu, cuda_stages, onnx_providers
from voiceagent.config import load_config
from voiceagent.errors import ConfigError

H100 = Gpu("NVIDIA H100 80GB HBM3", 81559, 80000)


def _probes(
    gpus: list[Gpu] | None = None, ort: tuple[str, ...] = ("CUDAExecutionProvider", "CPUExecutionProvider"), ct2: int = 1, vllm: bool = True
) -> GpuProbes:
    found = [H100] if gpus is None else gpus
    return GpuProbes(gpus=lambda: found, ort_providers=lambda: list(ort), ct2_devices=lambda: ct2, has_vllm=lambda: vllm)


def test_the_cpu_stack_needs_no_check() -> None:
    assert cuda_stages(load_config(env={})) == []
    assert check_gpu(load_config(env={}), _probes(gpus=[])) is None


def test_the_gpu_profile_passes_on_a_gpu_with_the_cuda_builds() -> None:
    config = load_config(env={}, overrides={"profile": "gpu"})
    assert cuda_stages(config) == ["stt", "turn", "tts", "llm"]
    assert check_gpu(config, _probes()) == H100


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        (_probes(gpus=[]), "needs an NVIDIA GPU, and nvidia-smi finds none"),
        (_probes(ort=("CPUExecutionProvider",)), "turn, tts on cuda needs onnxruntime's CUDA provider: install onnxruntime-gpu"),
        (_probes(ct2=0), "stt on cuda needs a CTranslate2 built for this machine's CUDA"),
        (_probes(vllm=False), "llm.backend=vllm needs vLLM"),
        (_probes(gpus=[Gpu("small", 24000, 20000)]), "needs 22272 MiB of GPU memory (3072 for the speech models, 19200 for vLLM"),
    ],
    ids=["no-gpu", "no-ort-cuda", "no-ct2-cuda", "no-vllm", "budget"],
)
def test_each_missing_piece_is_one_line_naming_the_fix(probes: GpuProbes, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_gpu(load_config(env={}, overrides={"profile": "gpu"}), probes)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_a_smaller_vllm_share_fits_the_same_gpu() -> None:
    config = load_config(env={}, overrides={"profile": "gpu", "llm.gpu_memory_utilization": "0.6"})
    assert check_gpu(config, _probes(gpus=[Gpu("small", 24000, 20000)])) is not None


def test_onnx_sessions_on_cuda_use_the_heuristic_convolution_search() -> None:
    assert onnx_providers("cpu") == ["CPUExecutionProvider"]
    cuda = onnx_providers("cuda")
    assert cuda[0] == ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}) and cuda[-1] == "CPUExecutionProvider"
