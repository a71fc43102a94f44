"""Finding the run a cut took out of a cached prompt (voiceagent.backends.kv_shift)."""

from __future__ import annotations

from voiceagent.backends.kv_shift import find_gap


def tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


SYSTEM = "<s>instructions|"
TURNS = [f"<u>question {i} about {'x' * (10 + i)}<a>answer {i} {'y' * (12 + i)}|" for i in range(8)]


def test_the_turns_kept_after_a_cut_are_found_behind_the_dropped_ones() -> None:
    cached = tokens(SYSTEM + "".join(TURNS) + "<u>last question<a>")
    prompt = tokens(SYSTEM + "".join(TURNS[3:]) + "<u>last question<a>reply|<u>new one<a>")
    start = len(SYSTEM + "<u>question ")  # the first kept turn begins as the first dropped one did
    gap = find_gap(cached, prompt, start)
    assert gap is not None
    at, removed, kept = gap
    assert at == start
    spliced = cached[:at] + cached[at + removed : at + removed + kept]
    # Everything the cache held after the dropped turns comes back, and it is the prompt's start.
    assert spliced == prompt[: len(spliced)]
    assert len(spliced) == len(cached) - len("".join(TURNS[:3]))


def test_the_longest_match_wins_over_the_nearest_cut_point() -> None:
    cached = tokens(SYSTEM + "<u>ab|" * 3 + "<u>ab-long tail that matches the prompt|")
    prompt = tokens(SYSTEM + "<u>ab-long tail that matches the prompt|<u>next")
    start = len(SYSTEM + "<u>ab")
    gap = find_gap(cached, prompt, start, min_kept=8)
    assert gap is not None
    at, removed, kept = gap
    assert cached[at + removed : at + removed + kept] == prompt[at : at + kept]
    assert kept == len("-long tail that matches the prompt|")


def test_no_gap_when_too_little_would_come_back_or_nothing_differs() -> None:
    cached = tokens(SYSTEM + "<u>one<a>two|<u>three")
    assert find_gap(cached, tokens(SYSTEM + "<u>three and more"), len(SYSTEM + "<u>")) is None  # 5 tokens < MIN_KEPT
    assert find_gap(cached, cached + tokens("more"), len(cached)) is None  # the whole cache is the prefix
    assert find_gap(cached, tokens(SYSTEM + "<u>something else entirely"), len(SYSTEM + "<u>")) is None
