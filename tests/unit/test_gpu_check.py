"""The start-up check of the stages configured on CUDA: one clear line for each missing piece."""

from __future__ import annotations

import pytest

from voiceagent.backends.gpu import Gpu, GpuProbes, check_gpu, cuda_stages, onnx_providers
from voiceagent.config import load_config
from voiceagent.errors import ConfigError

H100 = Gpu("NVIDIA H100 80GB HBM3", 81559, 80000)


def _probes(
    gpus: list[Gpu] | None = None,
    ort: tuple[str, ...] = ("CUDAExecutionProvider", "CPUExecutionProvider"),
    ct2: int = 1,
    vllm: bool = True,
    cublas: str | None = None,
) -> GpuProbes:
    found = [H100] if gpus is None else gpus
    return GpuProbes(
        gpus=lambda: found,
        ort_providers=lambda: list(ort),
        ct2_devices=lambda: ct2,
        has_vllm=lambda: vllm,
        ct2_cublas_missing=lambda: cublas,
    )


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
        (
            _probes(cublas="libcublas.so.12"),
            "stt on cuda: CTranslate2 loads libcublas.so.12 at its first decode, and it cannot be loaded here (a CTranslate2 built "
            "for another CUDA): install the matching cuBLAS (pip install nvidia-cublas-cu12",
        ),
        (_probes(vllm=False), "llm.backend=vllm needs vLLM"),
        (_probes(gpus=[Gpu("small", 24000, 20000)]), "needs 22272 MiB of GPU memory (3072 for the speech models, 19200 for vLLM"),
    ],
    ids=["no-gpu", "no-ort-cuda", "no-ct2-cuda", "ct2-cublas-12-on-cuda-13", "no-vllm", "budget"],
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


def test_the_cublas_ctranslate2_loads_is_read_from_its_library() -> None:
    """The installed CTranslate2 names a cuBLAS; on this machine (no CUDA) it cannot be loaded, so
    the probe names it (on a GPU machine with that cuBLAS it returns None)."""
    import ctypes

    from voiceagent.backends.gpu import ct2_cublas_missing

    missing = ct2_cublas_missing()
    if missing is None:
        pytest.skip("this machine can load the cuBLAS CTranslate2 names")
    assert missing.startswith("libcublas.so.")
    with pytest.raises(OSError):
        ctypes.CDLL(missing)
