"""The store of evaluated prefixes the llama.cpp contexts of one model share (no model: the
copying itself is tested with the real model in tests/integration/test_context.py)."""

from __future__ import annotations

from voiceagent.backends.llama_prefix import SharedPrefixes


def test_the_longest_matching_prefix_that_gains_enough_is_found() -> None:
    store = SharedPrefixes(min_tokens=4, limit=4)
    store.add(range(10), b"ten")
    store.add(range(20), b"twenty")
    store.add([*range(5), 99, 98, 97, 96, 95], b"other")
    prompt = list(range(30))
    found = store.best(prompt, cached=0)
    assert found is not None and found.data == b"twenty"
    # A context that already holds 17 tokens gains 3 from the 20: less than min_tokens, not worth a copy.
    assert store.best(prompt, cached=17) is None
    # One that holds 12: the 20 gains 8.
    assert store.best(prompt, cached=12) is not None
    # A prompt that leaves the prefix before its end does not match it.
    assert store.best([*range(15), 7, 7, 7, 7, 7, 7], cached=0) == store.best(list(range(10)), cached=0)
    # Longer than the prompt itself: no.
    assert store.best(list(range(8)), cached=0) is None


def test_short_prefixes_are_not_kept_and_the_least_recently_used_leaves_first() -> None:
    store = SharedPrefixes(min_tokens=5, limit=2)
    store.add(range(3), b"short")
    assert len(store) == 0
    store.add(range(10), b"a")
    store.add(range(100, 110), b"b")
    assert store.best(list(range(12)), cached=0) is not None  # "a" used: now the most recent
    store.add(range(200, 210), b"c")  # "b" leaves
    assert len(store) == 2 and store.nbytes == 2
    assert store.best(list(range(100, 112)), cached=0) is None
    assert store.best(list(range(12)), cached=0) is not None
    assert store.best(list(range(200, 212)), cached=0) is not None
