"""voiceagent.config: precedence and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiceagent.config import DEFAULT_EXAMPLES, Config, load_config, parse_examples
from voiceagent.errors import ConfigError, VoiceAgentError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "voiceagent.toml"
    path.write_text(text)
    return path


def test_defaults_without_file_env_or_overrides() -> None:
    assert load_config(env={}) == Config()


def test_precedence_defaults_file_env_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
log_level = "warning"
[llm]
model = "from-file"
max_tokens = 100
[vad]
threshold = 0.6
stop_ms = 200
[playout]
lead_ms = 150
""",
    )
    env = {
        "VOICEAGENT_LLM__MODEL": "from-env",
        "VOICEAGENT_VAD__THRESHOLD": "0.7",
        "VOICEAGENT_LOG_LEVEL": "debug",
        "VOICEAGENT_STT__PARTIALS": "off",
        "UNRELATED": "ignored",
    }
    overrides = {"llm.model": "from-flag", "turn.silence_ms": "700"}
    cfg = load_config(path, env=env, overrides=overrides)
    assert cfg.llm.model == "from-flag"  # flag > env > file
    assert cfg.vad.threshold == 0.7  # env > file
    assert cfg.log_level == "debug"  # top-level key from env
    assert cfg.llm.max_tokens == 100  # file > default
    assert cfg.vad.stop_ms == 200
    assert cfg.playout.lead_ms == 150
    assert cfg.stt.partials is False
    assert cfg.turn.silence_ms == 700
    # untouched keys keep their defaults, also inside sections the file changed
    assert cfg.llm.threads == Config().llm.threads
    assert cfg.vad.min_speech_ms == Config().vad.min_speech_ms
    assert cfg.tts == Config().tts


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[tts]\nspeed = 1.5\n")
    cfg = load_config(env={"VOICEAGENT_CONFIG": str(path)})
    assert cfg.tts.speed == 1.5


def test_explicit_file_beats_voiceagent_config_env(tmp_path: Path) -> None:
    explicit = write(tmp_path, "[tts]\nspeed = 2.0\n")
    other = tmp_path / "other.toml"
    other.write_text("[tts]\nspeed = 3.0\n")
    assert load_config(explicit, env={"VOICEAGENT_CONFIG": str(other)}).tts.speed == 2.0


@pytest.mark.parametrize(
    ("overrides", "env", "expected"),
    [
        ({"llm.modle": "x"}, {}, r"unknown key llm\.modle \(did you mean llm\.model\?\)"),
        ({}, {"VOICEAGENT_VAD__TRESHOLD": "0.5"}, r"unknown key vad\.treshold \(did you mean vad\.threshold\?\)"),
        ({"lm.model": "x"}, {}, r"unknown key lm \(did you mean llm\?\)"),
        ({"log_levl": "info"}, {}, r"unknown key log_levl \(did you mean log_level\?\)"),
    ],
)
def test_unknown_key_names_the_dotted_key_with_a_suggestion(overrides: dict[str, str], env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(env=env, overrides=overrides)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nprot = 80\n")
    with pytest.raises(ConfigError, match=r"server\.prot \(did you mean server\.port\?\)"):
        load_config(path, env={})


def test_unknown_key_without_close_match_has_no_hint() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={"llm.zzzzzz": "1"})
    assert "llm.zzzzzz" in str(info.value)
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"vad.threshold": "high"}, r"vad\.threshold must be a number"),
        ({"llm.threads": "two"}, r"llm\.threads must be an integer"),
        ({"llm.threads": "2.5"}, r"llm\.threads must be an integer"),
        ({"stt.partials": "maybe"}, r"stt\.partials must be a boolean"),
        ({"llm": "x"}, r"llm must be a table"),
        ({"llm.quant": "q2_k"}, r"llm\.quant must be one of shipped, iq4_nl, q4_0"),
    ],
)
def test_wrong_type_from_flags(overrides: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(env={}, overrides=overrides)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[llm]\nmodel = 5\n", r"llm\.model must be a string"),
        ("[llm]\nthreads = true\n", r"llm\.threads must be an integer"),
        ("[llm]\nthreads = 2.7\n", r"llm\.threads must be an integer"),
        ("[vad]\nthreshold = false\n", r"vad\.threshold must be a number"),
        ("[stt]\npartials = 1\n", r"stt\.partials must be a boolean"),
        ("vad = 3\n", r"vad must be a table"),
    ],
)
def test_wrong_type_from_file(tmp_path: Path, toml: str, expected: str) -> None:
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError, match=expected):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("vad.threshold", "1.5", r"vad\.threshold must be between 0 and 1"),
        ("vad.stop_ms", "10", r"vad\.stop_ms must be at least 32"),
        ("server.port", "70000", r"server\.port must be 0\.\.65535"),
        ("llm.max_tokens", "0", r"llm\.max_tokens must be 1\.\.4096"),
        ("tts.speed", "9", r"tts\.speed must be 0\.25\.\.4"),
        ("playout.chunk_ms", "5", r"playout\.chunk_ms must be 10\.\.1000"),
        ("turn.threshold", "0", r"turn\.threshold must be between 0 and 1"),
        ("log_level", "loud", r"log_level must be debug, info, warning or error"),
    ],
)
def test_out_of_range(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(env={}, overrides={key: value})


def test_out_of_range_from_env() -> None:
    with pytest.raises(ConfigError, match=r"playout\.lead_ms must be >= 0"):
        load_config(env={"VOICEAGENT_PLAYOUT__LEAD_MS": "-1"})


def test_bad_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm\nmodel = \n")
    with pytest.raises(ConfigError, match="is not valid TOML") as info:
        load_config(path, env={})
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="configuration file not found") as info:
        load_config(missing, env={})
    assert str(missing) in str(info.value)


def test_config_error_is_a_voiceagent_error_and_not_retryable() -> None:
    with pytest.raises(VoiceAgentError) as info:
        load_config(env={}, overrides={"vad.threshold": "2"})
    assert isinstance(info.value, ConfigError)
    assert info.value.retryable is False


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(AttributeError):
        cfg.llm.model = "x"  # type: ignore[misc]


def test_a_profile_sets_its_keys_and_the_users_own_settings_win(tmp_path: Path) -> None:
    cfg = load_config(env={}, overrides={"profile": "gpu"})
    assert (cfg.stt.device, cfg.turn.device, cfg.tts.device, cfg.vad.device, cfg.llm.backend) == ("cuda", "cuda", "cuda", "cpu", "vllm")
    assert cfg.stt.compute_type == "float16"
    path = tmp_path / "c.toml"
    path.write_text('profile = "gpu"\n[tts]\ndevice = "cpu"\n')
    from_file = load_config(path, env={"VOICEAGENT_STT__DEVICE": "cpu"})
    assert (from_file.profile, from_file.tts.device, from_file.stt.device, from_file.turn.device) == ("gpu", "cpu", "cpu", "cuda")
    assert load_config(env={"VOICEAGENT_PROFILE": "gpu"}).llm.backend == "vllm"


_CPU_MODELS = ("vad.model", "stt.model", "turn.model", "llm.model", "tts.model")


def _models(cfg: Config) -> tuple[str, ...]:
    return (cfg.vad.model, cfg.stt.model, cfg.turn.model, cfg.llm.model, cfg.tts.model)


def _endpointing(cfg: Config) -> tuple[object, ...]:
    return (cfg.vad.stop_ms, cfg.turn.silence_ms, cfg.turn.complete_ms, cfg.turn.threshold)


@pytest.mark.parametrize(
    ("profile", "stt", "beam", "llm"),
    [
        ("fast", "whisper-tiny", 1, "qwen2.5-0.5b"),
        ("balanced", "whisper-tiny", 1, "qwen2.5-1.5b"),
        ("quality", "whisper-base", 5, "qwen2.5-1.5b"),
    ],
)
def test_the_cpu_profiles_choose_their_models_from_a_flag_the_file_or_the_environment(
    tmp_path: Path, profile: str, stt: str, beam: int, llm: str
) -> None:
    path = write(tmp_path, f'profile = "{profile}"\n')
    for cfg in (
        load_config(env={}, overrides={"profile": profile}),  # --profile NAME
        load_config(path, env={}),  # profile = "NAME" in the TOML file
        load_config(env={"VOICEAGENT_PROFILE": profile}),
    ):
        assert cfg.profile == profile
        assert _models(cfg) == ("silero", stt, "smart-turn-v3", llm, "joe")
        assert cfg.stt.beam_size == beam  # beam search only where it paid: base (benchmarks/eval_stt.py)
        assert cfg.stt.tools_prompt is (stt == "whisper-base")  # the tools' prompt too: tiny lost by it
        assert cfg.stt.partial_model == ("whisper-tiny" if stt == "whisper-base" else "")  # base's partials from tiny
        assert _endpointing(cfg) == (160, 500, 400, 0.5)  # the same endpointing in all three
        assert (cfg.stt.device, cfg.llm.backend, cfg.llm.fallback_model) == ("cpu", "llama_cpp", "qwen2.5-0.5b")


def test_the_fast_profile_names_todays_defaults_explicitly() -> None:
    from voiceagent.config.profiles import PROFILES

    # Every model and the endpointing are written out, so the profile does not follow the defaults
    # if they change.  Should a default change on purpose, this test fails: keep ``fast`` as it is.
    assert set(_CPU_MODELS) | {"vad.stop_ms", "turn.silence_ms", "turn.complete_ms", "turn.threshold"} <= set(PROFILES["fast"])
    fast = load_config(env={}, overrides={"profile": "fast"})
    assert fast == Config(profile="fast")  # today the profile and the defaults agree in every setting
    assert PROFILES["fast"]["llm.quant"] == "iq4_nl"
    for name in ("balanced", "quality"):  # the other two change only the models they are about (with
        # the decoding measured for that model), and run the 1.5B as shipped (its answers have not
        # been measured converted)
        changed = {k for k, v in PROFILES[name].items() if PROFILES["fast"].get(k) != v}
        # (quality's partials from tiny: they feed the prefill, not the answer)
        stt = {"stt.model", "stt.beam_size", "stt.tools_prompt", "stt.partial_model", "stt.partial_interval_ms"}
        assert changed <= stt | {"llm.model", "llm.quant"}, (name, changed)
        assert PROFILES[name]["llm.quant"] == "shipped"


def test_the_users_own_keys_win_over_a_cpu_profiles(tmp_path: Path) -> None:
    path = write(tmp_path, 'profile = "quality"\n[llm]\nmodel = "smollm2-135m"\n[turn]\nsilence_ms = 700\n')
    cfg = load_config(path, env={"VOICEAGENT_VAD__STOP_MS": "200"}, overrides={"stt.model": "whisper-tiny"})
    assert cfg.profile == "quality"
    assert _models(cfg) == ("silero", "whisper-tiny", "smart-turn-v3", "smollm2-135m", "joe")  # file and flag win
    assert _endpointing(cfg) == (200, 700, 400, 0.5)  # the environment and the file win; the rest is the profile's
    # A flag's profile replaces the file's, and the file's own keys still win over it.
    cfg = load_config(path, env={}, overrides={"profile": "balanced"})
    assert (cfg.profile, cfg.stt.model, cfg.llm.model) == ("balanced", "whisper-tiny", "smollm2-135m")  # quality's STT is base


def test_an_unknown_profile_or_device_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="profile must be one of: auto, balanced, fast, gpu, quality"):
        load_config(env={}, overrides={"profile": "turbo"})
    with pytest.raises(ConfigError, match=r"stt\.device must be cpu or cuda"):
        load_config(env={}, overrides={"stt.device": "tpu"})
    with pytest.raises(ConfigError, match=r"llm\.speculative_config must be empty or a JSON object"):
        load_config(env={}, overrides={"llm.speculative_config": "[1, 2]"})
    with pytest.raises(ConfigError, match=r"llm\.fallback must be auto, llama_cpp or none"):
        load_config(env={}, overrides={"llm.fallback": "openai"})


def test_the_fallback_engine_follows_the_backend() -> None:
    assert load_config(env={}).llm.fallback_backend is None  # the embedded model needs no fallback to itself
    assert load_config(env={}, overrides={"llm.backend": "openai"}).llm.fallback_backend == "llama_cpp"
    assert load_config(env={}, overrides={"llm.backend": "vllm", "llm.fallback": "none"}).llm.fallback_backend is None


def test_reply_examples_are_user_and_assistant_lines_taking_turns(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nexamples = """\nUser: Hi, I am Bo.\n\nassistant:  Hello, Bo!\nUser: Bye.\nAssistant: Bye!\n"""\n')
    assert load_config(path, env={}).llm.example_pairs == (("Hi, I am Bo.", "Hello, Bo!"), ("Bye.", "Bye!"))
    assert load_config(env={}, overrides={"llm.examples": ""}).llm.example_pairs == ()
    assert Config().llm.example_pairs == ()  # off by default (measured: see DEFAULT_EXAMPLES)
    assert len(parse_examples(DEFAULT_EXAMPLES)) == 3


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Assistant: Hello!", "line 1: User and Assistant lines must take turns, User first"),
        ("User: Hi.\nUser: Hi again.", "line 2: User and Assistant lines must take turns"),
        ("User: Hi.", "the last User line has no Assistant line"),
        ("User: Hi.\nBot: Hello.", "line 2 must be 'User: ...' or 'Assistant: ...'"),
        ("User: Hi.\nAssistant:", "line 2 must be 'User: ...' or 'Assistant: ...' with some words"),
    ],
)
def test_malformed_reply_examples_are_one_clear_error_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"llm\.examples") as info:
        load_config(env={}, overrides={"llm.examples": text})
    assert says in str(info.value)
