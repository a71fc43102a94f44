"""The transcription prompt: the text Whisper reads as if it came just before the user's speech.

Whisper conditions on the text of the previous window (``<|startofprev|>``); a few names and
words there make it spell them as given and hear them where the audio is unclear.  A session's
prompt is, in order of preference:

* the client's own (Realtime ``audio.input.transcription.prompt``), as it wrote it;
* with ``stt.tools_prompt`` on, the descriptions of the tools the session offers: a user of a
  session with a ``get_weather`` tool is likely to ask about the weather, and Whisper base heard
  "What's the weather in Paris?" as "What's the winner in Paris?" in 3 of 5 voices without the
  tool's "Get the current weather in a city." and in none with it (benchmarks/eval_stt.py);
* none.

The conversation's own history is not used: as a prompt it helped base by half a point and cost
tiny 1.4 (docs/bench/stt_eval_prompts.md), and a misheard turn would then bias the next one.
"""

from __future__ import annotations

from voiceagent.settings import SessionSettings

__all__ = ["echoes_prompt", "transcription_prompt"]


def transcription_prompt(settings: SessionSettings, from_tools: bool) -> str:
    """The prompt for the next decode of a session with ``settings`` ("" for none).

    ``from_tools``: ``stt.tools_prompt``.  Each tool description becomes one sentence, in the
    order the tools were given; the backend keeps the prompt's last tokens if it is long
    (:data:`voiceagent.backends.whisper.MAX_PROMPT_TOKENS`)."""
    if settings.transcription_prompt.strip():
        return settings.transcription_prompt.strip()
    if not from_tools:
        return ""
    sentences = []
    for tool in settings.tools:
        text = " ".join(tool.description.split())
        if text:
            sentences.append(text if text[-1] in ".!?" else text + ".")
    return " ".join(sentences)


_ECHO_MIN_WORDS = 3


def _plain_words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def echoes_prompt(text: str, prompt: str) -> bool:
    """Whether ``text`` (a transcript decoded with ``prompt``) is only the prompt written back:
    at least three words, each inside a run of three or more of them that stands in the prompt
    word for word, in its order (case and punctuation aside).  Whisper sometimes writes its prompt
    instead of the speech: Whisper base, prompted with the tools' descriptions, heard "Book a taxi
    to the airport at five in the evening." as "Order a taxi that picks the attendee up at the main
    entrance.", one description word for word, and "Send an email to Anna saying that I will be
    late." as "Send an email for the attendee of something in a number of minutes.", the halves of
    two (benchmarks/eval_long_conversation.py).  A user who reads the descriptions aloud is rarer than
    that, and such speech decoded again without the prompt is still heard."""
    words = _plain_words(text)
    if len(words) < _ECHO_MIN_WORDS:
        return False
    source = _plain_words(prompt)
    runs = {tuple(source[i : i + _ECHO_MIN_WORDS]) for i in range(len(source) - _ECHO_MIN_WORDS + 1)}
    covered = [False] * len(words)
    for i in range(len(words) - _ECHO_MIN_WORDS + 1):
        if tuple(words[i : i + _ECHO_MIN_WORDS]) in runs:
            covered[i : i + _ECHO_MIN_WORDS] = [True] * _ECHO_MIN_WORDS
    return all(covered)
