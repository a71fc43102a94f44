"""The semantic cache's key with the real embedding model: all-MiniLM-L6-v2 as the catalog ships
it, run by voiceagent.backends.minilm, against sentence-transformers' own output, and near-miss
questions against the shipped threshold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from voiceagent.backends.minilm import MiniLm
from voiceagent.cache.store import EMBED_MODEL, THRESHOLD, ReplyStore
from voiceagent.models.source import resolve

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "minilm_reference.json"
AUDIO = np.zeros(160, dtype=np.int16)

NEAR_MISSES = [
    ("What is the capital of Austria?", "What is the capital of Australia?"),
    ("Set a timer for ten minutes.", "Set a timer for two minutes."),
    ("Is the museum open on Mondays?", "Is the museum closed on Mondays?"),
    ("When does the first train leave?", "When does the last train leave?"),
    ("Is parking free?", "Is parking not free?"),
    ("Can I bring my dog?", "Can I bring my cat?"),
    ("What time does the museum open?", "What time does the museum open on Sundays?"),
    ("Where is the meeting?", "When is the meeting?"),
    ("Can I call you later?", "Can you call me later?"),
]
PARAPHRASES = [
    ("When do you close?", "What time do you close today?"),
    ("Where is the meeting?", "Where does the meeting take place?"),
    ("How long is the train from London to Paris?", "How long does the train from London to Paris take?"),
    ("Thank you.", "Thanks a lot."),
]


@pytest.fixture(scope="module")
def model() -> MiniLm:
    return MiniLm(resolve("embed", EMBED_MODEL).path)


def test_embeddings_match_sentence_transformers(model: MiniLm) -> None:
    ref = json.loads(REFERENCE.read_text())
    ours = model.embed(ref["sentences"])
    theirs = np.array(ref["embeddings"], dtype=np.float32)
    cosines = (ours * theirs).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() > 0.99999, dict(zip(ref["sentences"], cosines.round(6).tolist(), strict=True))
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_one_at_a_time_is_the_same_as_a_batch(model: MiniLm) -> None:
    texts = ["Hello.", "How long does the train from London to Paris take?"]
    batch = model.embed(texts)
    single = np.stack([model.embed([t])[0] for t in texts])
    assert np.abs(batch - single).max() < 1e-5


def test_near_misses_never_hit_at_the_shipped_threshold_and_paraphrases_do(model: MiniLm) -> None:
    store = ReplyStore(threshold=THRESHOLD, ttl_s=60.0, max_entries=100)
    for i, (a, _) in enumerate(NEAR_MISSES + PARAPHRASES):
        store.add("scope", a, model.embed([a])[0], f"reply {i}", AUDIO)
    for _, b in NEAR_MISSES:
        found = store.lookup("scope", b, model.embed([b])[0])
        assert found.entry is None, f"{b!r} hit {found.entry.question!r} at {found.similarity:.3f}"
    hits = [store.lookup("scope", b, model.embed([b])[0]) for _, b in PARAPHRASES]
    assert [h.entry.question if h.entry else None for h in hits] == [a for a, _ in PARAPHRASES]
