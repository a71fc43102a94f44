"""voiceagent.conversation.history: what the listener heard, and the prompt built from it."""

from __future__ import annotations

from voiceagent.conversation.history import AssistantItem, History, UserItem, input_messages, new_id
from voiceagent.settings import InputItem
from voiceagent.tools.spec import Message, ToolCall


def spoken(*clauses: tuple[str, float]) -> AssistantItem:
    item = AssistantItem(id=new_id("item"), gen=1)
    for text, ms in clauses:
        item.add_clause(text)
        item.add_audio(ms)
    return item


REPLY = (("Hello there. ", 1000.0), ("How are you doing today? ", 1000.0), ("Bye.", 500.0))


def test_uncut_item_is_the_full_text() -> None:
    item = spoken(*REPLY)
    assert item.audio_ms == 2500.0
    assert item.text == item.full_text == "Hello there. How are you doing today? Bye."


def test_cut_keeps_whole_clauses_then_a_word_prefix_of_the_playing_clause() -> None:
    item = spoken(*REPLY)
    item.cut(1500.0)  # all of clause 0, half of clause 1 (5 words -> 2)
    assert item.heard_ms == 1500.0
    assert item.text == "Hello there. How are"
    assert item.full_text == "Hello there. How are you doing today? Bye."


def test_cut_at_a_clause_boundary_keeps_whole_clauses_only() -> None:
    item = spoken(*REPLY)
    item.cut(2000.0)
    assert item.text == "Hello there. How are you doing today?"


def test_cut_inside_the_first_clause() -> None:
    item = spoken(*REPLY)
    item.cut(600.0)  # 0.6 of "Hello there." -> 1 word
    assert item.text == "Hello"
    item.cut(400.0)
    assert item.text == ""


def test_server_estimates_only_cut_further() -> None:
    item = spoken(*REPLY)
    item.cut(1800.0)
    assert item.text == "Hello there. How are you doing"
    item.cut(1200.0)
    assert item.heard_ms == 1200.0
    assert item.text == "Hello there. How"
    item.cut(2400.0)
    assert item.heard_ms == 1200.0
    assert item.text == "Hello there. How"


def test_the_clients_first_figure_replaces_the_servers_estimate_then_only_cuts() -> None:
    # The server guessed 1200 ms at the barge-in; the client's speaker had played 1800 ms.
    item = spoken(*REPLY)
    item.cut(1200.0)
    item.cut(1800.0, by_client=True)
    assert item.heard_ms == 1800.0 and item.heard_by_client
    assert item.text == "Hello there. How are you doing"
    # A later, larger figure from the client does not bring back what it said was unheard.
    item.cut(2400.0, by_client=True)
    assert item.heard_ms == 1800.0
    item.cut(600.0, by_client=True)
    assert item.heard_ms == 600.0 and item.text == "Hello"
    # Nor does a server estimate after the client has spoken.
    item.cut(2000.0)
    assert item.heard_ms == 600.0


def test_cut_is_clamped_to_the_audio() -> None:
    item = spoken(*REPLY)
    item.cut(10_000.0)
    assert item.heard_ms == 2500.0
    assert item.text == item.full_text
    item.cut(-5.0)
    assert item.heard_ms == 0.0
    assert item.text == ""


def test_cut_text_is_always_a_word_prefix_of_the_full_text() -> None:
    full_words = spoken(*REPLY).full_text.split()
    previous = len(full_words)
    for heard in range(2500, -1, -50):
        item = spoken(*REPLY)
        item.cut(float(heard))
        words = item.text.split()
        assert words == full_words[: len(words)], heard
        assert len(words) <= previous  # less heard, never more words
        previous = len(words)


def test_add_audio_before_any_clause_makes_an_empty_clause() -> None:
    item = AssistantItem(id="item_x", gen=3)
    item.add_audio(100.0)
    assert item.audio_ms == 100.0
    assert item.text == ""


def test_history_find_delete_last_id() -> None:
    h = History()
    assert h.last_id is None
    u = h.add_user("hi")
    a = h.add_assistant(1, "item_a")
    assert h.last_id == "item_a"
    assert h.find(u.id) is u
    assert h.find("item_a") is a
    assert h.find("nope") is None
    assert h.delete(u.id) is True
    assert h.delete(u.id) is False
    assert h.items == [a]


def test_messages_are_system_then_history_in_order() -> None:
    h = History()
    h.add_user("What is two plus two?")
    a = h.add_assistant(1, new_id("item"))
    a.add_clause("Four.")
    h.add_user("Thanks")
    assert h.messages("Be brief.") == [
        Message("system", "Be brief."),
        Message("user", "What is two plus two?"),
        Message("assistant", "Four."),
        Message("user", "Thanks"),
    ]


def test_messages_use_the_heard_text_of_assistant_items() -> None:
    h = History()
    h.add_user("Tell me a story")
    a = h.add_assistant(1, new_id("item"))
    for text, ms in REPLY:
        a.add_clause(text)
        a.add_audio(ms)
    a.cut(1500.0)
    assert h.messages("sys")[-1] == Message("assistant", "Hello there. How are")


def test_pending_user_excludes_the_user_item_of_the_same_generation() -> None:
    h = History()
    h.add_user("earlier", gen=1)
    h.add_user("what time is it", gen=4)
    msgs = h.messages("sys", pending_user="what time is it", gen=4)
    assert msgs == [Message("system", "sys"), Message("user", "earlier"), Message("user", "what time is it")]
    # another generation's pending text does not hide it
    msgs = h.messages("sys", pending_user="something else", gen=5)
    assert [m.content for m in msgs] == ["sys", "earlier", "what time is it", "something else"]
    # without pending text the committed item is the prompt's last message
    assert h.messages("sys", gen=4)[-1] == Message("user", "what time is it")


def test_user_items_without_generation_are_never_excluded() -> None:
    h = History()
    h.add_user("typed text")  # gen -1
    msgs = h.messages("sys", pending_user="typed text", gen=-1)
    assert [m.content for m in msgs] == ["sys", "typed text", "typed text"]


def test_empty_assistant_items_are_skipped() -> None:
    h = History()
    h.add_user("one")
    h.add_assistant(1, new_id("item"))  # failed before saying anything
    cut = h.add_assistant(2, new_id("item"))
    cut.add_clause("Never heard.")
    cut.add_audio(500.0)
    cut.cut(0.0)
    h.add_user("two")
    assert [m.role for m in h.messages("sys")] == ["system", "user", "user"]


def test_examples_follow_the_system_message() -> None:
    h = History()
    for i in range(10):
        h.add_user(f"{i}" * 100)
    examples = (("I'm Alex.", "Nice to meet you, Alex!"), ("Hi.", "Hello!"))
    msgs = h.messages("sys", pending_user="p" * 100, examples=examples)
    assert msgs[:5] == [
        Message("system", "sys"),
        Message("user", "I'm Alex."),
        Message("assistant", "Nice to meet you, Alex!"),
        Message("user", "Hi."),
        Message("assistant", "Hello!"),
    ]
    assert [m.content for m in msgs[5:]] == [f"{i}" * 100 for i in range(10)] + ["p" * 100]


def test_ids_are_unique_with_their_prefix() -> None:
    ids = {new_id("item") for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("item_") for i in ids)
    assert UserItem(id="u", text="t").role == "user"


def test_trim_drops_the_oldest_items_and_says_which() -> None:
    from voiceagent.conversation.history import History

    h = History()
    ids = [h.add_user(f"q{i}").id for i in range(5)]
    assert h.trim(5) == []
    assert h.trim(3) == ids[:2]
    assert [i.id for i in h.items] == ids[2:]


def test_an_input_reference_to_an_mcp_call_reads_as_the_call_and_its_result() -> None:
    h = History()
    item = h.add_mcp_call(0, "call_m", "lookup", '{"q": "x"}', "docs")
    item.output = "found x"
    msgs = input_messages("sys", (InputItem(ref=item.id),), h)
    assert msgs == [
        Message("system", "sys"),
        Message("assistant", "", (ToolCall("call_m", "lookup", '{"q": "x"}'),)),
        Message("tool", "found x", tool_call_id="call_m"),
    ]


def test_a_clause_whose_sending_stopped_midway_keeps_only_the_words_of_what_was_heard() -> None:
    """A reply paused (or cut) mid-clause and heard to the end of what was sent: the clause was
    not heard whole, so its words are cut in proportion to its whole audio."""
    item = AssistantItem(id="i", gen=1)
    item.add_clause("Once upon a time, ", expected_ms=1000.0)
    item.add_audio(1000.0)
    item.add_clause("there was a dragon who loved books.", expected_ms=2000.0)
    item.add_audio(1000.0)  # half of it sent
    item.cut(2000.0)  # all that was sent was heard
    assert item.text == "Once upon a time, there was a"
