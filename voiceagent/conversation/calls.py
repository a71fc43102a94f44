"""The calls a reply's model makes, as the conversation core keeps them (sans I/O).

A function call goes into the history and to the client, who runs it and sends its output; one
of a built-in tool is run here at once; one of an MCP tool is run by the shell
(:class:`~voiceagent.conversation.effects.RunMcpCall`) while its response stays open, and its
result comes back through :meth:`ToolCalls.mcp_ended`.  A call made before its reply is released
(a speculative answer) is held and told at release.
"""

from __future__ import annotations

import dataclasses
import logging

from voiceagent.config.prompts import MCP_APOLOGY, timer_note
from voiceagent.conversation.catalog import ToolBox
from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import CancelMcpCalls, RunMcpCall, StartTimer
from voiceagent.conversation.history import CANCELLED_OUTPUT, McpCallItem, new_id
from voiceagent.conversation.reply import Reply, ReplyState, ResponseOptions
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import (
    CallControl,
    CallSummary,
    ErrorEvent,
    FunctionCallAdded,
    McpCallAdded,
    McpCallDone,
    ToolCallMade,
    ToolCallRejected,
    ToolOutputAdded,
)
from voiceagent.settings import InputItem
from voiceagent.tools.args import loads_lenient
from voiceagent.tools.builtin import TimerRequest

__all__ = ["ToolCalls"]

log = logging.getLogger(__name__)

_CANCELLED_ERROR: dict[str, object] = {"type": "tool_execution_error", "message": "cancelled: the response ended first"}


class ToolCalls:
    """The tool-call half of the conversation core: every method only changes state and adds
    effects to the core's :class:`Sink`; ``trim`` keeps the history within its limit."""

    def __init__(self, ctx: CoreContext, toolbox: ToolBox) -> None:
        self._ctx = ctx
        self._toolbox = toolbox
        self._running: dict[str, Reply] = {}  # MCP call item id -> its reply, while the call runs
        self._timers_due: list[TimerRequest] = []  # built-in timers that went off, not announced yet

    def on_call(self, reply: Reply, ev: ToolCallMade | ToolCallRejected) -> None:
        """A call the LLM made for ``reply``: into the history and to the client, once released."""
        if not reply.released:
            reply.held.append(ev)
            return
        now = self._ctx.clock.now()
        if isinstance(ev, ToolCallRejected):
            message = f"the model's call of {ev.name!r} was not usable and was not sent ({ev.problem})"
            self._ctx.sink.emit(
                ErrorEvent(t=now, gen=ev.gen, session=self._ctx.session, code="invalid_tool_call", message=message, kind="server_error")
            )
            return
        if reply.options.out_of_band:
            # Reported with the response only: the conversation never sees it, so no output is
            # expected for it and no built-in tool runs.
            call = CallSummary(new_id("item"), ev.call_id, ev.name, ev.arguments)
            reply.calls.append(call)
            self._call_added(reply, ev, now, call.item_id, None, in_conversation=False)
            return
        client_tools = reply.options.client_tools(self._ctx.host.settings)
        mcp_tool = self._toolbox.mcp_tool(ev.name, client_tools)
        if mcp_tool is not None:
            prev = self._ctx.history.last_id
            item = self._ctx.history.add_mcp_call(ev.gen, ev.call_id, ev.name, ev.arguments, mcp_tool.server_label)
            reply.calls.append(CallSummary(item.id, ev.call_id, ev.name, ev.arguments, mcp_tool.server_label))
            reply.mcp_items.append(item)
            reply.mcp_running[item.id] = len(reply.calls)
            self._running[item.id] = reply
            self._ctx.sink.emit(
                McpCallAdded(
                    t=now,
                    gen=ev.gen,
                    session=self._ctx.session,
                    response_id=reply.id,
                    item_id=item.id,
                    previous_item_id=prev,
                    output_index=len(reply.calls),
                    server_label=mcp_tool.server_label,
                    name=ev.name,
                    arguments=ev.arguments,
                )
            )
            self._ctx.trim()
            arguments = loads_lenient(item.arguments) if item.arguments.strip() else {}
            self._ctx.sink.add(RunMcpCall(item, mcp_tool, arguments if isinstance(arguments, dict) else {}))
            return
        prev = self._ctx.history.last_id
        item_id = self._ctx.history.add_call(ev.gen, ev.call_id, ev.name, ev.arguments).id
        reply.calls.append(CallSummary(item_id, ev.call_id, ev.name, ev.arguments))
        self._call_added(reply, ev, now, item_id, prev)
        self._ctx.trim()
        if self._toolbox.runs_here(ev.name, client_tools):
            output, effect = self._toolbox.run(ev.name, ev.arguments)
            self._add_output(ev.call_id, output, synthetic=False)
            reply.answer_after = True
            if isinstance(effect, TimerRequest):
                self._ctx.sink.add(StartTimer(effect))
            elif effect is not None:  # call control: the phone transport carries it out
                self._ctx.sink.emit(CallControl(t=now, gen=ev.gen, session=self._ctx.session, response_id=reply.id, action=effect))

    def _call_added(
        self, reply: Reply, ev: ToolCallMade, now: float, item_id: str, previous: str | None, *, in_conversation: bool = True
    ) -> None:
        self._ctx.sink.emit(
            FunctionCallAdded(
                t=now,
                gen=ev.gen,
                session=self._ctx.session,
                response_id=reply.id,
                item_id=item_id,
                previous_item_id=previous,
                output_index=len(reply.calls),
                call_id=ev.call_id,
                name=ev.name,
                arguments=ev.arguments,
                in_conversation=in_conversation,
            )
        )

    def mcp_ended(self, item_id: str, output: str | None, error: dict[str, object] | None) -> Reply | None:
        """MCP call ``item_id`` returned ``output`` or failed with ``error``: the client is told.
        Returns its reply when this was its last call and its generation has ended (the core
        finishes it); nothing happens for a call whose reply was closed meanwhile."""
        reply = self._running.pop(item_id, None)
        index = reply.mcp_running.pop(item_id, None) if reply is not None else None
        if reply is None or index is None:
            return None
        item = next(i for i in reply.mcp_items if i.id == item_id)
        item.output, item.error = output, error
        self._mcp_done(reply, item, index)
        return reply if not reply.mcp_running and reply.state is ReplyState.ENDING else None

    def cancel(self, reply: Reply) -> None:
        """``reply`` ends while MCP calls of its still run: they are cancelled (the shell waits
        for them) and their items closed as cancelled."""
        running, reply.mcp_running = reply.mcp_running, {}
        if not running:
            return
        self._ctx.sink.add(CancelMcpCalls(tuple(running)))
        for item_id, index in running.items():
            self._running.pop(item_id, None)
            item = next(i for i in reply.mcp_items if i.id == item_id)
            item.error, item.cancelled = dict(_CANCELLED_ERROR), True
            self._mcp_done(reply, item, index)

    def _mcp_done(self, reply: Reply, item: McpCallItem, index: int) -> None:
        """Tell the client how MCP call ``item`` ended; a failure is an ``error`` too, and the
        answer after the reply apologises."""
        now = self._ctx.clock.now()
        reply.answer_after = True
        if item.error is not None and not item.cancelled:
            reply.mcp_failed.append(item.name)
            message = f"MCP tool {item.name!r} on server {item.server_label!r} failed: {item.error.get('message')}"
            self._ctx.sink.emit(
                ErrorEvent(t=now, gen=item.gen, session=self._ctx.session, code="mcp_call_failed", message=message, kind="server_error")
            )
        self._ctx.sink.emit(
            McpCallDone(
                t=now,
                gen=item.gen,
                session=self._ctx.session,
                response_id=reply.id,
                item_id=item.id,
                previous_item_id=self._ctx.history.previous_id(item.id),
                output_index=index,
                server_label=item.server_label,
                name=item.name,
                arguments=item.arguments,
                output=item.output,
                error=item.error,
            )
        )

    def add_output(self, call_id: str, output: str) -> str:
        """The client's result of call ``call_id``; returns its item's id.  Exactly once per
        call: an unknown call or a second output is refused (``ProtocolError``), also when the
        call was already closed as cancelled because the conversation went on."""
        if self._ctx.history.call(call_id) is None:
            raise ProtocolError("call_not_found", f"no function call with call_id {excerpt(call_id)}", param="item.call_id")
        answered = self._ctx.history.output_of(call_id)
        if answered is not None:
            why = "was closed as cancelled: the conversation went on before it arrived" if answered.synthetic else "already has one"
            raise ProtocolError("tool_output_already_received", f"call {excerpt(call_id)} {why}", param="item.call_id")
        return self._add_output(call_id, output, synthetic=False)

    def close_unanswered(self) -> None:
        """An answer goes ahead whatever the client sends now: each call still without its
        output is closed as cancelled, in the history and for the client (exactly once)."""
        for call in self._ctx.history.unanswered_calls():
            self._add_output(call.call_id, CANCELLED_OUTPUT, synthetic=True)

    def _add_output(self, call_id: str, output: str, *, synthetic: bool) -> str:
        item = self._ctx.history.add_output(call_id, output, synthetic=synthetic)
        self._ctx.sink.emit(
            ToolOutputAdded(
                t=self._ctx.clock.now(),
                gen=self._ctx.scope.current,
                session=self._ctx.session,
                item_id=item.id,
                previous_item_id=self._ctx.history.previous_id(item.id),
                call_id=call_id,
                output=output,
                synthetic=synthetic,
            )
        )
        self._ctx.trim()  # at most server.max_history_items, calls and outputs included
        return item.id

    def sequel(self, reply: Reply) -> ResponseOptions:
        """The answer after ``reply``'s tools ran: the same response's sequel (its metadata, token
        limit and, with its own ``input``, that input and the calls it made), an apology after a
        failed MCP call.  No further calls in it: a small model may call the same tool again and again."""
        opts = reply.options
        instructions = opts.instructions
        if reply.mcp_failed:
            apology = MCP_APOLOGY.format(tools=", ".join(dict.fromkeys(reply.mcp_failed)))
            instructions = (instructions or self._ctx.host.settings.instructions) + apology
        given = None if opts.input is None else (*opts.input, *self._made_items(reply))
        return dataclasses.replace(opts, instructions=instructions, tool_choice="none", out_of_band=False, input=given)

    def timer_went_off(self, timer: TimerRequest) -> None:
        """A built-in timer went off: it waits for :meth:`next_timer` (no response active)."""
        self._timers_due.append(timer)

    def next_timer(self) -> tuple[str, ResponseOptions] | None:
        """The label of the next timer that went off and the response that announces it; None
        when none waits.  One that went off in a transcription session is dropped (logged)."""
        while self._timers_due:
            timer = self._timers_due.pop(0)
            settings = self._ctx.host.settings
            if settings.kind != "realtime":
                log.info("session %s: timer %r went off in a transcription session: not announced", self._ctx.session, timer.label)
                continue
            instructions = settings.instructions + timer_note(timer.label, timer.seconds)
            return timer.label, ResponseOptions(instructions=instructions, tool_choice="none")
        return None

    def _made_items(self, reply: Reply) -> tuple[InputItem, ...]:
        """References to the calls ``reply`` made and their outputs, as they stand in the history."""
        refs: list[InputItem] = []
        for call in reply.calls:
            if self._ctx.history.find(call.item_id) is None:
                continue  # trimmed away since
            refs.append(InputItem(ref=call.item_id))
            output = self._ctx.history.output_of(call.call_id)
            if output is not None:
                refs.append(InputItem(ref=output.id))
        return tuple(refs)

    @staticmethod
    def summaries(reply: Reply) -> tuple[CallSummary, ...]:
        """``reply``'s calls as ``response.done`` lists them: an MCP call with its result."""
        results = {i.id: i for i in reply.mcp_items}
        return tuple(
            call
            if call.item_id not in results
            else dataclasses.replace(call, output=results[call.item_id].output, error=results[call.item_id].error)
            for call in reply.calls
        )
