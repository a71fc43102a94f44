"""voiceagent.models.source, model_checks and model_pull on small files: which kind of value a
setting holds, how hub ids resolve in a cache laid out as huggingface_hub lays it out, and the
one line each wrong kind of model gets.  No model is loaded and nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

from tests.hub_cache import add_repo
from tests.model_files import ENGLISH_ONLY, write_gguf, write_onnx, write_piper_voice, write_whisper_dir
from voiceagent import cli
from voiceagent.config import load_config
from voiceagent.errors import ModelError
from voiceagent.models import pull as model_pull
from voiceagent.models.checks import check, check_language, gguf_metadata, onnx_inputs, whisper_multilingual
from voiceagent.models.source import cached_repos, hub_cache, hub_ref, origin_of, piper_voice_file, resolve

TEMPLATE = {"general.architecture": "qwen2", "tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache at ``$HF_HOME/hub``, the only one resolution may read."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    return tmp_path / "hf" / "hub"


def gguf(path: Path, **extra: str) -> Path:
    return write_gguf(path, {**TEMPLATE, **extra}, {"tokenizer.ggml.tokens": ["<s>", "hello", "."]})


# -- which kind of value ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "value", "origin"),
    [
        ("stt", "whisper-tiny", "catalog"),
        ("llm", "qwen2.5-0.5b", "catalog"),
        ("tts", "joe", "catalog"),
        ("stt", "tiny.en", "hub"),
        ("stt", "large-v3-turbo", "hub"),
        ("stt", "distil-small.en", "hub"),
        ("stt", "Systran/faster-whisper-small", "hub"),
        ("llm", "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", "hub"),
        ("llm", "Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q4_k_m.gguf", "hub"),
        ("tts", "en_US-lessac-medium", "hub"),
        ("vad", "onnx-community/silero-vad:onnx/model.onnx", "hub"),
        ("llm", "/models/x.gguf", "path"),
        ("llm", "~/x.gguf", "path"),
        ("llm", "./x.gguf", "path"),
        ("llm", "x.gguf", "path"),
        ("tts", "voices/en.onnx", "path"),
    ],
)
def test_each_value_is_a_catalog_name_a_path_or_a_hub_id(kind: str, value: str, origin: str) -> None:
    assert origin_of(kind, value) == origin


def test_an_existing_folder_is_a_path_even_where_it_reads_like_a_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "org" / "repo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert origin_of("stt", "org/repo") == "path"
    assert origin_of("stt", "org/other") == "hub"


def test_an_unknown_name_lists_the_catalog_and_the_forms_a_value_takes() -> None:
    with pytest.raises(ModelError) as err:
        origin_of("stt", "whisper-tiiny")
    assert "unknown stt model 'whisper-tiiny'" in err.value.message
    assert "whisper-base, whisper-tiny" in err.value.message and "tiny.en" in err.value.message
    assert "\n" not in err.value.message


def test_hub_ids_name_the_repository_and_file_they_stand_for() -> None:
    assert hub_ref("stt", "tiny.en").repo == "Systran/faster-whisper-tiny.en"  # faster-whisper's own table
    assert hub_ref("stt", "tiny.en").folder
    assert hub_ref("stt", "me/my-whisper-ct2").repo == "me/my-whisper-ct2"
    voice = hub_ref("tts", "en_US-lessac-medium")
    assert (voice.repo, voice.file) == ("rhasspy/piper-voices", "en/en_US/lessac/medium/en_US-lessac-medium.onnx")
    assert piper_voice_file("de_DE-thorsten-x_low") == "de/de_DE/thorsten/x_low/de_DE-thorsten-x_low.onnx"
    quant = hub_ref("llm", "Qwen/Q-GGUF:Q4_K_M")
    assert (quant.repo, quant.file, quant.pattern, quant.suffix) == ("Qwen/Q-GGUF", "", "Q4_K_M", ".gguf")
    assert hub_ref("llm", "Qwen/Q-GGUF:sub/q.gguf").file == "sub/q.gguf"
    with pytest.raises(ModelError, match=r"a Whisper model is a whole repository"):
        hub_ref("stt", "Systran/faster-whisper-tiny:model.bin")
    with pytest.raises(ModelError, match=r"name a \.onnx file"):
        hub_ref("vad", "org/vad:model.bin")
    assert hub_ref("embed", "sentence-transformers/all-MiniLM-L12-v2").folder
    with pytest.raises(ModelError, match=r"cache\.embed_model .*a whole repository"):
        hub_ref("embed", "sentence-transformers/all-MiniLM-L12-v2:model.safetensors")


def test_the_hub_cache_follows_huggingface_hubs_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "direct"))
    assert hub_cache() == tmp_path / "direct"


# -- resolution in the hub cache ---------------------------------------------------------------


def test_hub_ids_resolve_in_the_cache_to_their_snapshot(hub: Path, tmp_path: Path) -> None:
    whisper = write_whisper_dir(tmp_path / "w")
    snapshot = add_repo(hub, "Systran/faster-whisper-tiny.en", {p.name: p for p in whisper.iterdir()})
    weights = gguf(tmp_path / "q.gguf")
    add_repo(hub, "Qwen/Q-GGUF", {"q-q4_k_m.gguf": weights, "q-q8_0.gguf": weights})
    voice = write_piper_voice(tmp_path / "v.onnx")
    layout = "en/en_US/joe/medium/en_US-joe-medium.onnx"
    add_repo(hub, "rhasspy/piper-voices", {layout: voice, layout + ".json": voice.with_name("v.onnx.json")})

    stt = resolve("stt", "tiny.en")
    assert (stt.origin, stt.path, stt.repo) == ("hub", snapshot, "Systran/faster-whisper-tiny.en")
    llm = resolve("llm", "Qwen/Q-GGUF:q8_0")  # a quant pattern, any case
    assert llm.path.name == "q-q8_0.gguf" and llm.origin == "hub"
    assert resolve("llm", "Qwen/Q-GGUF:q-q4_k_m.gguf").path.name == "q-q4_k_m.gguf"
    assert resolve("tts", "en_US-joe-medium").path.name == "en_US-joe-medium.onnx"
    assert {repo for repo, _ in cached_repos()} == {"Systran/faster-whisper-tiny.en", "Qwen/Q-GGUF", "rhasspy/piper-voices"}


def test_a_hub_model_not_in_the_cache_is_one_line_naming_it_the_cache_and_the_pull_command(hub: Path) -> None:
    with pytest.raises(ModelError) as err:
        resolve("stt", "base.en")
    message = err.value.message
    assert message.startswith("stt.model 'base.en' is not in the Hugging Face cache")
    assert str(hub) in message and "Systran/faster-whisper-base.en" in message
    assert message.endswith("fetch it with: voiceagent models pull base.en")
    assert "\n" not in message


def test_a_repository_cached_without_the_file_asked_for_names_the_file(hub: Path, tmp_path: Path) -> None:
    add_repo(hub, "Qwen/Q-GGUF", {"q-q4_k_m.gguf": gguf(tmp_path / "q.gguf")})
    with pytest.raises(ModelError, match=r"no \.gguf file matching 'q8_0' in Qwen/Q-GGUF.*voiceagent models pull Qwen/Q-GGUF:q8_0"):
        resolve("llm", "Qwen/Q-GGUF:q8_0")
    with pytest.raises(ModelError, match=r"no Qwen/Q-GGUF/other\.gguf"):
        resolve("llm", "Qwen/Q-GGUF:other.gguf")


def test_a_pattern_that_matches_two_cached_ggufs_asks_for_one(hub: Path, tmp_path: Path) -> None:
    weights = gguf(tmp_path / "q.gguf")
    add_repo(hub, "Qwen/Q-GGUF", {"q-q4_k_m.gguf": weights, "q-q4_k_s.gguf": weights})
    with pytest.raises(ModelError, match=r"2 cached files match in Qwen/Q-GGUF \(q-q4_k_m\.gguf, q-q4_k_s\.gguf\); name one"):
        resolve("llm", "Qwen/Q-GGUF:q4_k")


def test_a_split_gguf_resolves_to_its_first_part(hub: Path, tmp_path: Path) -> None:
    first = gguf(tmp_path / "a.gguf")
    add_repo(hub, "big/M-GGUF", {"m-q4-00001-of-00002.gguf": first, "m-q4-00002-of-00002.gguf": tmp_path / "a.gguf"})
    assert resolve("llm", "big/M-GGUF:q4").path.name == "m-q4-00001-of-00002.gguf"


# -- paths, and each wrong kind of model -------------------------------------------------------


def test_local_paths_resolve_as_given(tmp_path: Path) -> None:
    source = resolve("llm", str(gguf(tmp_path / "m.gguf")))
    assert (source.origin, source.path, source.repo) == ("path", tmp_path / "m.gguf", "")
    assert resolve("stt", str(write_whisper_dir(tmp_path / "w"))).path == tmp_path / "w"
    assert resolve("vad", str(write_onnx(tmp_path / "v.onnx", ["input", "state", "sr"]))).path.name == "v.onnx"
    assert resolve("turn", str(write_onnx(tmp_path / "t.onnx", ["input_features"]))).path.name == "t.onnx"


def test_a_missing_path_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"^llm.model '.*/absent.gguf': no such file or folder: .*absent.gguf$"):
        resolve("llm", str(tmp_path / "absent.gguf"))


def wrong(kind: str, path: Path) -> str:
    with pytest.raises(ModelError) as err:
        check(kind, path, f"{kind}.model 'X'")
    assert "\n" not in err.value.message and err.value.message.startswith(f"{kind}.model 'X': ")
    return err.value.message


def test_llama_cpp_refuses_a_safetensors_folder_a_folder_of_ggufs_and_a_file_that_is_not_gguf(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"x")
    assert "is a Hugging Face (safetensors) folder; llama.cpp needs a .gguf file" in wrong("llm", hf)
    folder = tmp_path / "ggufs"
    folder.mkdir()
    gguf(folder / "a.gguf")
    assert "is a folder; name the .gguf file in it (a.gguf)" in wrong("llm", folder)
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not gguf")
    assert "is not a GGUF file (no GGUF magic number)" in wrong("llm", tmp_path / "x.gguf")


def test_a_gguf_without_a_chat_template_is_refused_and_one_with_it_passes(tmp_path: Path) -> None:
    bare = write_gguf(tmp_path / "base.gguf", {"general.architecture": "llama"}, {"tokenizer.ggml.tokens": ["a"]})
    assert "has no chat template (no tokenizer.chat_template in its GGUF metadata)" in wrong("llm", bare)
    check("llm", gguf(tmp_path / "chat.gguf"), "llm.model 'X'")


def test_gguf_metadata_reads_strings_and_numbers_past_arrays_of_strings(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", {"general.name": "tiny", "context": 2048}, {"tokens": ["a", "bc", "def" * 50]})
    assert gguf_metadata(path) == {"general.name": "tiny", "context": 2048}
    path.write_bytes(path.read_bytes()[:40])  # cut inside the array
    with pytest.raises(ModelError, match="is not a GGUF file"):
        gguf_metadata(path)


def test_whisper_needs_a_ctranslate2_folder_with_its_tokenizer(tmp_path: Path) -> None:
    assert "is a file; faster-whisper needs a CTranslate2 Whisper folder" in wrong("stt", gguf(tmp_path / "m.gguf"))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "model.safetensors").write_bytes(b"x")
    assert "is a Transformers checkpoint, not CTranslate2; convert it with: ct2-transformers-converter" in wrong("stt", hf)
    # Without tokenizer.json faster-whisper would download one at load: refused.
    assert "lacks tokenizer.json" in wrong("stt", write_whisper_dir(tmp_path / "w", files=("model.bin",)))
    other = write_whisper_dir(tmp_path / "nllb")
    (other / "config.json").write_text('{"add_source_bos": false}')
    assert "is a CTranslate2 model but not a Whisper one" in wrong("stt", other)


def test_an_english_only_whisper_refuses_another_language(tmp_path: Path) -> None:
    english = write_whisper_dir(tmp_path / "en", vocabulary=ENGLISH_ONLY)
    assert not whisper_multilingual(english)
    check_language(english, "en", "stt.model 'X'")
    with pytest.raises(ModelError, match=r"^stt.model 'X' is English-only but stt.language is 'de': choose a multilingual Whisper"):
        check_language(english, "de", "stt.model 'X'")
    multilingual = write_whisper_dir(tmp_path / "multi")
    assert whisper_multilingual(multilingual)
    check_language(multilingual, "de", "stt.model 'X'")


def test_a_piper_voice_needs_its_json_beside_it(tmp_path: Path) -> None:
    alone = write_piper_voice(tmp_path / "v.onnx", config={})
    assert "the Piper voice v.onnx has no v.onnx.json beside it" in wrong("tts", alone)
    broken = write_piper_voice(tmp_path / "b.onnx", config={"audio": {}})
    assert "is not a Piper voice's config (no audio.sample_rate or phoneme_id_map)" in wrong("tts", broken)
    check("tts", write_piper_voice(tmp_path / "ok.onnx"), "tts.model 'X'")


def test_onnx_models_are_checked_for_the_inputs_their_backend_feeds(tmp_path: Path) -> None:
    turn = write_onnx(tmp_path / "turn.onnx", ["input_features"])
    assert onnx_inputs(turn) == ["input_features"]
    assert "turn.onnx is not a Silero VAD (its inputs are input_features; a Silero VAD takes input, state, sr)" in wrong("vad", turn)
    assert "is not a Smart Turn model" in wrong("turn", write_onnx(tmp_path / "vad.onnx", ["input", "state", "sr"]))
    assert "is not a Piper voice" in wrong("tts", turn)
    (tmp_path / "model.bin").write_bytes(b"x")
    assert "is not an ONNX model (.onnx)" in wrong("vad", tmp_path / "model.bin")


# -- what a pull fetches -----------------------------------------------------------------------


def test_pull_infers_the_kind_from_the_configuration_or_the_form() -> None:
    assert model_pull.kind_of("tiny.en") == "stt"
    assert model_pull.kind_of("Systran/faster-whisper-small") == "stt"
    assert model_pull.kind_of("en_US-lessac-medium") == "tts"
    assert model_pull.kind_of("Qwen/Q-GGUF:Q4_K_M") == "llm"
    assert model_pull.kind_of("org/silero:model.onnx") == "onnx"
    assert model_pull.kind_of("org/silero:model.onnx", {"org/silero:model.onnx": "vad"}) == "vad"


def test_pull_selects_the_files_an_id_stands_for() -> None:
    whisper = {"model.bin": 1, "config.json": 1, "tokenizer.json": 1, "vocabulary.txt": 1, "README.md": 1, "model.safetensors": 9}
    chosen = model_pull.select_files("stt", "Systran/faster-whisper-tiny", whisper)
    assert chosen == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    quants = {"q-q4_k_m.gguf": 1, "q-q8_0-00001-of-00002.gguf": 1, "q-q8_0-00002-of-00002.gguf": 1}
    assert model_pull.select_files("llm", "Qwen/Q:Q4_K_M", quants) == ["q-q4_k_m.gguf"]
    assert model_pull.select_files("llm", "Qwen/Q:q8_0", quants) == ["q-q8_0-00001-of-00002.gguf", "q-q8_0-00002-of-00002.gguf"]
    with pytest.raises(ModelError, match=r"has 2 \.gguf files matching 'q' .*name one: Qwen/Q:FILE"):
        model_pull.select_files("llm", "Qwen/Q:q", quants)
    voice = "en/en_US/lessac/medium/en_US-lessac-medium.onnx"
    assert model_pull.select_files("tts", "en_US-lessac-medium", {voice: 1, voice + ".json": 1}) == [voice, voice + ".json"]
    with pytest.raises(ModelError, match="not a CTranslate2 Whisper repository"):
        model_pull.select_files("stt", "openai/whisper-tiny", {"model.safetensors": 1, "config.json": 1})
    # vLLM's kind: the configs, tokenizer and safetensors at the top of the repository, nothing else.
    repo = {
        "config.json": 1,
        "generation_config.json": 1,
        "tokenizer.json": 1,
        "tokenizer_config.json": 1,
        "merges.txt": 1,
        "vocab.json": 1,
        "model-00001-of-00002.safetensors": 9,
        "model-00002-of-00002.safetensors": 9,
        "model.safetensors.index.json": 1,
        "README.md": 1,
        "pytorch_model.bin": 9,
        "original/consolidated.pth": 9,
    }
    assert model_pull.select_files("vllm", "Qwen/Qwen2.5-7B-Instruct", repo) == sorted(
        [
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "merges.txt",
            "vocab.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
        ]
    )
    with pytest.raises(ModelError, match="not a Hugging Face model repository with safetensors weights"):
        model_pull.select_files("vllm", "Org/Gguf", {"config.json": 1, "m.gguf": 1})


def test_pull_refuses_at_once_when_hf_hub_offline_is_set(monkeypatch: pytest.MonkeyPatch, hub: Path) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match=r"cannot fetch tiny.en: HF_HUB_OFFLINE is set"):
        model_pull.pull("tiny.en", "stt", say=lambda _line: None)


def test_only_pull_takes_model_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["models", "verify", "tiny.en"]) == 2
    assert capsys.readouterr().err.strip() == "voiceagent: error: only 'voiceagent models pull' takes model names, not 'verify'"


def test_a_wrong_partial_model_is_one_line_before_any_model_loads(tmp_path: Path) -> None:
    """``stt.partial_model`` is checked with the other model settings (cli._require_models), not
    first met by the loader after the VAD and the main Whisper have loaded."""
    config = load_config(env={}, overrides={"profile": "fast", "stt.partial_model": str(tmp_path / "absent")})
    with pytest.raises(ModelError, match=r"^stt.partial_model '.*/absent': no such file or folder: .*absent$"):
        cli._require_models(config)
    unknown = load_config(env={}, overrides={"profile": "fast", "stt.partial_model": "no-such-model"})
    with pytest.raises(ModelError, match="unknown stt model 'no-such-model'"):
        cli._require_models(unknown)
