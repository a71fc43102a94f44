"""The transcription prompt: the text Whisper reads as if it came just before the user's speech.

Whisper conditions on the text of the previous window (``<|startofprev|>``); a few names and
words there make it spell them as given and hear them where the audio is unclear.  A session's
prompt is, in order of preference:

* the client's own (Realtime ``audio.input.transcription.prompt``), as it wrote it;
* with ``stt.tools_prompt`` on, the descriptions of the tools the session offers: a user of a
  session with a ``get_weather`` tool is likely to ask about the weather, and Whisper base heard
  "What's the weather in Paris?" as "What's the winner in Paris?" in 3 of 5 voices without the
  tool's "Get the current weather in a city." and in none with it (scripts/eval_stt.py);
* none.

The conversation's own history is not used: as a prompt it helped base by half a point and cost
tiny 1.4 (docs/bench/stt_eval_prompts.md), and a misheard turn would then bias the next one.
"""

from __future__ import annotations

from voiceagent.settings import SessionSettings

__all__ = ["transcription_prompt"]


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
