"""The prompt of one answer: instructions, examples, tools and the history, fitted to the window.

The CALL_TOOLS note and the tool listing go after the instructions whenever tools are offered
(:func:`~voiceagent.tools.spec.with_tools`), also with ``tool_choice`` ``"none"`` (the answer from
a built-in tool's result, a timer announcement): the system message, and so the KV-cached prefix
with the tools' listing after it, stays the one of the turns before; the engine's grammar keeps
that reply from calling.  The figures behind the wording: docs/decisions/tool-calls.md.
"""

from __future__ import annotations

import asyncio
import logging

from voiceagent.clock import Clock
from voiceagent.config.prompts import ANSWER_FROM_TOOLS
from voiceagent.conversation.catalog import ToolBox
from voiceagent.conversation.history import History, input_messages
from voiceagent.conversation.prompt_fit import PromptFitter
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.events import Event, ItemsDropped, UserTurn
from voiceagent.observability.metrics import Metrics
from voiceagent.pipeline import Generations
from voiceagent.settings import SessionSettings
from voiceagent.stages.llm import LlmPrompt
from voiceagent.tools.spec import Message, with_tools

__all__ = ["Prompter", "keeps_conversation"]

log = logging.getLogger(__name__)


def keeps_conversation(options: ResponseOptions | None) -> bool:
    """An out-of-band response, or one that reads its own ``input``, leaves the conversation as
    it is: no outputs are added to close its calls and no items are cut to fit."""
    return options is not None and (options.out_of_band or options.input is not None)


class Prompter:
    """Builds prompts for one session; ``fitter`` cuts the history to the LLM's window (None:
    never cut), and each cut is announced to the client (``conversation.item.deleted``)."""

    def __init__(
        self,
        session_id: str,
        clock: Clock,
        scope: Generations,
        history: History,
        toolbox: ToolBox,
        fitter: PromptFitter | None,
        metrics: Metrics,
    ) -> None:
        self._id = session_id
        self._clock = clock
        self._scope = scope
        self._history = history
        self._toolbox = toolbox
        self._fitter = fitter
        self._metrics = metrics
        self._fitting = asyncio.Lock()

    async def prompt(self, turn: UserTurn, options: ResponseOptions | None, settings: SessionSettings) -> tuple[LlmPrompt, Event | None]:
        """The messages, tools and tool choice of the answer of ``turn``, asked with ``options``
        (None: the session's); with the :class:`ItemsDropped` to send when the history was cut."""
        if options is not None and options.say is not None:
            return LlmPrompt((), (), "none", say=options.say), None  # words to speak as they are: no model asked
        instructions = (options.instructions if options and options.instructions else None) or settings.instructions
        client_tools = (options or ResponseOptions()).client_tools(settings)
        # An out-of-band response only reports its calls (none runs here): it is offered the
        # client's tools alone, not the MCP servers' or the built-in ones it would never run.
        tools = client_tools if options is not None and options.out_of_band else self._toolbox.offered(client_tools)
        choice = options.tool_choice if options is not None and options.tool_choice is not None else settings.tool_choice
        if choice not in ("auto", "none", "required") and all(t.name != choice for t in tools):
            choice = "auto"
        # The examples show the reply style of the server's instructions; a response with its own
        # instructions, or one that may call a tool, is prompted without them.
        examples = settings.examples if not (options and (options.instructions or options.closing)) and not tools else ()
        instructions = with_tools(instructions, tools)
        max_tokens = options.max_tokens if options is not None else None
        if options is not None and options.input is not None:
            # The client's own context for this response: read as given, not cut to the window.
            given = input_messages(instructions, options.input, self._history)
            return LlmPrompt(_closed(given, options), tools, choice, max_tokens), None

        def render() -> list[Message]:
            return _closed(self._history.messages(instructions, pending_user=turn.text, gen=turn.gen, examples=examples), options)

        if self._fitter is None:
            return LlmPrompt(render(), tools, choice, max_tokens), None
        async with self._fitting:  # a prefill and a turn may ask at once: one cut at a time
            fitted = await self._fitter.fit(self._history, render, tools, may_cut=not keeps_conversation(options))
        dropped = None
        if fitted.dropped:
            self._metrics.context_cut(len(fitted.dropped))
            log.info(
                "session %s: %d oldest history items dropped to fit the LLM's context window (prompt now %d of %d tokens)",
                self._id,
                len(fitted.dropped),
                fitted.tokens,
                self._fitter.window,
            )
            dropped = ItemsDropped(t=self._clock.now(), gen=self._scope.current, session=self._id, item_ids=tuple(fitted.dropped))
        return LlmPrompt(fitted.messages, tools, choice, max_tokens), dropped


def _closed(messages: list[Message], options: ResponseOptions | None) -> list[Message]:
    """``messages`` with what closes them: after tool outputs, the word to answer from them (not
    from words); then the response's own closing task (:attr:`ResponseOptions.closing`)."""
    if messages and messages[-1].role == "tool":
        messages.append(Message("system", ANSWER_FROM_TOOLS))
    if options is not None and options.closing:
        messages.append(Message("system", options.closing))
    return messages
