"""ReplyStore: scope, threshold and guards, LRU and time-to-live (hand-made unit vectors; the real
embedding model is tests/integration/test_semantic_cache.py's)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from voiceagent.cache.store import CachedClause, ReplyStore, scope_of


def unit(*xs: float) -> npt.NDArray[np.float32]:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(**kw: float) -> ReplyStore:
    return ReplyStore(threshold=kw.get("threshold", 0.9), ttl_s=kw.get("ttl_s", 60.0), max_entries=int(kw.get("max_entries", 10)))


def test_a_close_question_in_the_same_scope_hits() -> None:
    s = store()
    s.add("A", "When do you close?", unit(1, 0.1), "At six.")
    found = s.lookup("A", "What time do you close today?", unit(1, 0.15))
    assert found.entry is not None and found.entry.reply == "At six."
    assert found.similarity > 0.99 and found.entry.hits == 1


def test_another_scope_never_shares_an_answer() -> None:
    s = store()
    s.add("A", "When do you close?", unit(1, 0), "At six.")
    found = s.lookup("B", "When do you close?", unit(1, 0))
    assert found.entry is None and found.reason == "empty"


def test_below_the_threshold_is_a_miss_with_the_nearest_question() -> None:
    s = store(threshold=0.95)
    s.add("A", "When do you close?", unit(1, 0), "At six.")
    found = s.lookup("A", "When do you open?", unit(1, 0.5))
    assert found.entry is None and found.reason == "below_threshold"
    assert found.nearest == "When do you close?" and 0.8 < found.similarity < 0.95


def test_a_similar_question_that_fails_a_guard_is_refused_but_a_passing_one_hits() -> None:
    s = store(threshold=0.8)
    s.add("A", "Set a timer for ten minutes.", unit(1, 0), "Ten minutes, starting now.")
    refused = s.lookup("A", "Set a timer for two minutes.", unit(1, 0.05))
    assert refused.entry is None and refused.reason == "numbers"
    s.add("A", "Set a timer for two minutes.", unit(1, 0.3), "Two minutes, starting now.")
    # The nearest entry (ten) fails the guard; the next one (two) passes: that one answers.
    found = s.lookup("A", "Set a timer for 2 minutes.", unit(1, 0.05))
    assert found.entry is not None and found.entry.reply == "Two minutes, starting now."


def test_entries_expire_after_their_time_to_live() -> None:
    clock = Clock()
    s = ReplyStore(threshold=0.9, ttl_s=60.0, max_entries=10, clock=clock)
    s.add("A", "Hello.", unit(1, 0), "Hi!")
    clock.now = 59.0
    assert s.lookup("A", "Hello.", unit(1, 0)).entry is not None
    clock.now = 61.0
    assert s.lookup("A", "Hello.", unit(1, 0)).entry is None
    assert len(s) == 0


def test_the_least_recently_used_goes_past_the_bound() -> None:
    s = store(max_entries=2)
    s.add("A", "Hello.", unit(1, 0, 0), "Hi!")
    s.add("A", "Where is the exit?", unit(0, 1, 0), "Behind you.")
    assert s.lookup("A", "Hello.", unit(1, 0, 0)).entry is not None  # Hello is now the most recent
    s.add("A", "What is your name?", unit(0, 0, 1), "Joe.")
    assert len(s) == 2
    assert s.lookup("A", "Where is the exit?", unit(0, 1, 0)).entry is None
    assert s.lookup("A", "Hello.", unit(1, 0, 0)).entry is not None


def test_the_scope_hash_covers_every_part() -> None:
    base = {"instructions": "Be brief.", "tools": [], "model": "qwen2.5-0.5b", "voice": "joe"}
    assert scope_of(**base) == scope_of(**dict(reversed(list(base.items()))))
    for key, other in (("instructions", "Be long."), ("tools", ["get_time"]), ("model", "qwen2.5-1.5b"), ("voice", "amy")):
        assert scope_of(**(base | {key: other})) != scope_of(**base)


def test_stored_audio_is_bounded_in_bytes() -> None:
    s = ReplyStore(threshold=0.9, ttl_s=60.0, max_entries=10, max_bytes=3000)
    second = CachedClause("x", np.zeros(1000, dtype=np.int16), 16000)  # 2000 bytes each
    s.add("A", "Hello.", unit(1, 0, 0), "Hi!", [second])
    s.add("A", "Where is the exit?", unit(0, 1, 0), "Behind you.", [second])
    assert len(s) == 1 and s.nbytes == 2000
    assert s.lookup("A", "Where is the exit?", unit(0, 1, 0)).entry is not None
