"""What widgets ask of the core, carried out in one place: the App's handler for each
``...Requested`` message (the rule is in tui/messages.py). ``DianaApp`` is this app with its
screens, its runtime's opening and closing, and its keys."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

from diana.core.api import Core, add_tool
from diana.core.api.errors import (
    AlreadyDecided,
    DamagedProposal,
    NotCancellable,
    ProposalChanged,
    RequestFailed,
    StorageError,
    UnknownProposal,
    UnknownRequest,
)
from diana.core.api.shown import summarize
from diana.core.api.types import ChatSummary, Decision, ProposalStatus
from textual import on, work
from textual.content import Content

from .keys import KeysInOrder
from .messages import ActionRequested, DecisionRequested
from .modals.chats import ChatsScreen
from .modals.memory import MemoryScreen
from .modals.models import ModelsScreen
from .modals.policy import PolicyScreen
from .modals.prompts import RejectReasonScreen
from .modals.proposal_detail import ProposalDetailScreen
from .modals.server_detail import ServerDetailScreen
from .modals.tool_form import ToolFormScreen
from .nudge import nudge
from .panes import AgentsPane, ApprovalsPane, ChatPane, ExecutionLogPane, ServersPane
from .theme import tone

Outcome = TypeVar("Outcome")


class ActionsApp(KeysInOrder):
    """The App's side of the action rule: each handler carries one action out through the
    runtime's services and tells the person what came of it."""

    core: Core | None

    @on(ApprovalsPane.DetailsRequested)
    async def open_proposal(self, event: ApprovalsPane.DetailsRequested) -> None:
        if self.core is not None:
            proposal = await self.core.proposal(event.proposal)
            self.push_screen(ProposalDetailScreen(proposal))

    @on(ExecutionLogPane.ProposalRequested)
    async def open_call_proposal(self, event: ExecutionLogPane.ProposalRequested) -> None:
        """Enter on a logged call that needed approval: its proposal, by id or by the call."""
        if self.core is None:
            return
        proposal = await self.core.proposal_of_call(
            event.correlation_id, event.tool, proposal_id=event.proposal, during=event.during
        )
        if proposal is None:
            self.notify("That call's proposal is no longer stored.", severity="warning")
        else:
            self.push_screen(ProposalDetailScreen(proposal))

    @on(DecisionRequested)
    async def decide(self, event: DecisionRequested) -> None:
        """The one place a person's decision is carried out, wherever it was made."""
        if self.core is None:
            return
        if event.verb == "reject" and event.reason is None:
            try:
                proposal = await self.core.proposal(event.proposal)
            except UnknownProposal:
                self.decision_failed(f"no proposal {event.proposal}", event.from_chat)
                return

            def rejected(reason: str | None) -> None:
                if reason is not None:  # None: the person cancelled
                    self.carry_out(replace(event, reason=reason or None))

            self.push_screen(RejectReasonScreen(proposal.id, proposal.tool), rejected)
            return
        self.carry_out(event)

    def carry_out(self, event: DecisionRequested) -> None:
        """The decision is carried out in the background, its database steps first; its
        proposal leaves the pending list as its call starts, or sooner if that is slow."""
        self.run_decision(event)
        self.query_one(ApprovalsPane).deciding(event.proposal)

    @work(group="decisions", exit_on_error=False)
    async def run_decision(self, event: DecisionRequested) -> None:
        """Decide in the background: the call an approval runs may take a while. The
        Approvals pane lists what the database says once it is decided, or failed to be."""
        try:
            await self._decide(event)
        finally:
            self.query_one(ApprovalsPane).decided(event.proposal)

    async def _decide(self, event: DecisionRequested) -> None:
        assert self.core is not None
        core = self.core
        proposal_id = event.proposal
        try:
            if event.verb == "approve":
                decision = await core.approve(proposal_id, by="tui", seen=event.seen)
            elif event.verb == "always" and event.rule is not None:
                decision = await core.always(proposal_id, event.rule, by="tui", seen=event.seen)
            else:
                decision = await core.reject(proposal_id, by="tui", reason=event.reason)
        except AlreadyDecided as exc:
            self.decision_failed(str(exc), event.from_chat)
            return
        except UnknownProposal:
            self.decision_failed(f"no proposal {proposal_id}", event.from_chat)
            return
        except (DamagedProposal, ProposalChanged, StorageError) as exc:
            self.decision_failed(str(exc), event.from_chat)
            return
        line = decision_line(decision)
        self.query_one(ApprovalsPane).show_outcome(line)
        if event.from_chat:
            self.query_one(ChatPane).say(line)

    def decision_failed(self, message: str, from_chat: bool) -> None:
        if from_chat:
            self.query_one(ChatPane).note(message, "warning")
        else:
            self.notify(message, severity="warning")

    @on(ServersPane.ReconnectRequested)
    @on(ServerDetailScreen.ReconnectRequested)
    async def reconnect_servers(
        self, event: ServersPane.ReconnectRequested | ServerDetailScreen.ReconnectRequested
    ) -> None:
        if self.core is None:
            return
        try:
            names = await self.core.reconnect(event.server)
        except KeyError:
            return  # removed from the config meanwhile
        if names:
            self.notify(f"Reconnecting {', '.join(names)}", timeout=3)

    @on(ServersPane.SignInRequested)
    async def sign_in(self, event: ServersPane.SignInRequested) -> None:
        """The browser opens on the server's sign-in page; its URL is also copied, for when
        no browser opens (a remote terminal)."""
        if self.core is None:
            return

        def offer(url: str) -> None:
            self.copy_to_clipboard(url)
            self.notify(
                f"Sign in to {event.server} in the browser. If none opened, the sign-in URL "
                "is on the clipboard.",
                timeout=10,
            )

        try:
            await self.core.sign_in(event.server, show_url=offer)
        except KeyError:
            return  # removed from the config meanwhile
        self.notify(f"Signing in to {event.server}…", timeout=3)

    @on(ApprovalsPane.Arrived)
    def nudge_if_away(self, event: ApprovalsPane.Arrived) -> None:
        """A person looking at another window hears of new proposals (settings.json
        ``notify``); one looking at the app sees them in Approvals."""
        if self.core is None:
            return
        notify = self.core.settings.notify
        written = "" if self.app_focus else nudge(event.proposals, notify, os.environ)
        if written and self._driver is not None:  # what App.bell writes through, too
            self._driver.write(written)
        self.core.log_event(
            "approvals.nudge",
            proposals=[proposal.id for proposal in event.proposals],
            focused=self.app_focus,
            notify=notify,
            sent=bool(written),
        )

    @on(ServersPane.SwitchRequested)
    def switch_server(self, event: ServersPane.SwitchRequested) -> None:
        """Written to mcp-servers.json and applied at once (stopping a server takes a moment:
        not on the app's own loop turn)."""
        if self.core is not None:
            self.run_worker(
                self._switch(event.server, event.enable), group="servers", exit_on_error=False
            )

    async def _switch(self, server: str, enable: bool) -> None:
        assert self.core is not None
        try:
            await self.core.server_requests.set_enabled(server, enable)
        except RequestFailed as exc:
            self.notify(
                f"{server} not {'enabled' if enable else 'disabled'}: {exc}",
                severity="error",
                timeout=8,
            )

    def carry_out_request(
        self, request: ActionRequested[Outcome], action: Callable[[Core], Awaitable[Outcome]]
    ) -> None:
        """Carry ``action`` out in the background and answer ``request`` with what it gave
        (or the exception it raised: the widget that asked says what went wrong)."""
        if self.core is None:
            request.outcome.cancel()
            return
        self.run_worker(
            self._answer(request, action, self.core), group="actions", exit_on_error=False
        )

    async def _answer(
        self,
        request: ActionRequested[Outcome],
        action: Callable[[Core], Awaitable[Outcome]],
        core: Core,
    ) -> None:
        try:
            request.answer(await action(core))
        except Exception as exc:
            request.fail(exc)

    def answer_now(self, request: ActionRequested[None], action: Callable[[Core], None]) -> None:
        """A change that is made at once (a setting of the chat): made, and answered."""
        if self.core is None:
            request.outcome.cancel()
            return
        action(self.core)
        request.answer(None)

    @on(ChatPane.CallRequested)
    def call_tool(self, event: ChatPane.CallRequested) -> None:
        self.carry_out_request(
            event, lambda core: core.call_tool(event.tool, event.arguments, origin="chat")
        )

    @on(ChatPane.ClearRequested)
    def clear_conversation(self, event: ChatPane.ClearRequested) -> None:
        self.answer_now(event, lambda core: core.chat.clear())

    @on(ChatPane.ModelRequested)
    def choose_model(self, event: ChatPane.ModelRequested) -> None:
        self.answer_now(event, lambda core: setattr(core.chat, "model", event.model))

    @on(ModelsScreen.UseRequested)
    def use_model(self, event: ModelsScreen.UseRequested) -> None:
        self.answer_now(event, lambda core: setattr(core.chat, "model", event.model))
        for screen in self.screen_stack:  # the chat is under the view
            for chat in screen.query(ChatPane):
                chat.update_title()

    @on(ChatPane.SettingRequested)
    def change_chat_setting(self, event: ChatPane.SettingRequested) -> None:
        if event.kind == "system":
            self.carry_out_request(event, lambda core: core.chat.set_system(event.value or ""))
        else:
            self.carry_out_request(
                event, lambda core: core.chat.set_option(event.name, event.value)
            )

    @on(ChatsScreen.OpenRequested)
    def open_conversation(self, event: ChatsScreen.OpenRequested) -> None:
        async def opening(core: Core) -> None:
            messages = await core.chat.open(event.conversation)
            title = (await core.chats.get(event.conversation)).title
            for chat in self.chat_panes():
                await chat.show_conversation(messages, title)

        self.carry_out_request(event, opening)

    @on(ChatsScreen.NewRequested)
    def new_conversation(self, event: ChatsScreen.NewRequested) -> None:
        async def starting(core: Core) -> None:
            if core.chat.busy:
                raise ValueError("a reply is still being written — stop it (Esc) first")
            core.chat.clear()
            for chat in self.chat_panes():
                chat.forget_transcript()
                chat.note("New conversation.")

        self.carry_out_request(event, starting)

    @on(ChatsScreen.DeleteRequested)
    def delete_conversation(self, event: ChatsScreen.DeleteRequested) -> None:
        async def deleting(core: Core) -> ChatSummary:
            is_open = core.chat.conversation_id == event.conversation
            if is_open and core.chat.busy:
                raise ValueError("the conversation is being answered — stop the reply (Esc) first")
            gone = await core.chats.delete(event.conversation)
            if is_open:
                core.chat.clear()
                for chat in self.chat_panes():
                    await chat.conversation_deleted()
            return gone

        self.carry_out_request(event, deleting)

    def chat_panes(self) -> list[ChatPane]:
        """The chat, wherever it is (under a view)."""
        return [chat for screen in self.screen_stack for chat in screen.query(ChatPane)]

    @on(ChatPane.ThinkRequested)
    def set_think(self, event: ChatPane.ThinkRequested) -> None:
        self.answer_now(event, lambda core: setattr(core.chat, "think", event.think))

    @on(ChatPane.SendOnRequested)
    def send_on(self, _event: ChatPane.SendOnRequested) -> None:
        """The turn that waits on a decision goes on without it: typing is given back."""
        if self.core is not None and self.core.chat.send_on():
            self.query_one(ChatPane).focus_input()

    @on(AgentsPane.SwitchRequested)
    def switch_agent(self, event: AgentsPane.SwitchRequested) -> None:
        self.carry_out_request(
            event, lambda core: core.switch_agent(event.agent, stop=event.stopping)
        )

    @on(MemoryScreen.ForgetRequested)
    def forget_fact(self, event: MemoryScreen.ForgetRequested) -> None:
        self.carry_out_request(event, lambda core: core.memory.forget(event.fact))

    @on(PolicyScreen.RemoveRuleRequested)
    def remove_rule(self, event: PolicyScreen.RemoveRuleRequested) -> None:
        self.carry_out_request(event, lambda core: core.remove_rule(event.name, event.kind))

    @on(ToolFormScreen.AddRequested)
    def add_local_tool(self, event: ToolFormScreen.AddRequested) -> None:
        self.carry_out_request(event, lambda core: core.change_local_tools(add_tool(event.entry)))

    @on(ServersPane.AddRequested)
    def add_server(self, event: ServersPane.AddRequested) -> None:
        """Queued with the sub-agent, which tests the server before it is written."""
        if self.core is None:
            return
        form = event.form
        request = self.core.server_requests.add_server(
            form.name, form.config, origin="tui", prepare=form.prepare
        )
        self.notify(f"Adding {form.name}: {request.id} queued (tested before it is written)")

    @on(ServersPane.CancelSubagentRequested)
    def cancel_subagent_request(self, event: ServersPane.CancelSubagentRequested) -> None:
        if self.core is None:
            return
        try:
            self.core.server_requests.cancel(event.request, "cancelled in the MCP Servers pane")
        except (NotCancellable, UnknownRequest) as exc:
            self.notify(str(exc), severity="warning")
            return
        self.notify(f"Cancelling {event.request} ({event.kind} {event.server})", timeout=3)

    @on(ExecutionLogPane.CancelRequested)
    def cancel_call(self, event: ExecutionLogPane.CancelRequested) -> None:
        if self.core is not None and self.core.cancel_call(event.call_id):
            self.notify(f"Cancelling {event.tool}", timeout=3)

    @on(ServersPane.DetailsRequested)
    def open_server_details(self, event: ServersPane.DetailsRequested) -> None:
        if self.core is not None and self.core.connection_of(event.server) is not None:
            core = self.core
            self.push_screen(
                ServerDetailScreen(
                    core.server_diagnostic(event.server),
                    core.server_diagnostic,
                    core.connected,
                    pins=core,
                )
            )


def decision_line(decision: Decision) -> Content:
    """One line for the pane: what was decided and, for an approval, what the call gave."""
    proposal, result = decision.proposal, decision.result
    if proposal.status is ProposalStatus.REJECTED:
        why = result.error if result is not None else None
        return Content.assemble(
            ("✗ ", tone("caution")),
            (proposal.id, "bold"),
            f" {proposal.tool} rejected",
            f": {why}" if why else "",
        )
    assert result is not None  # only a rejection comes without a result
    if result.success:
        return Content.assemble(
            ("✓ ", tone("good")), (proposal.id, "bold"), f" {proposal.tool}: ", summarize(result)
        )
    return Content.assemble(
        ("✗ ", tone("bad")),
        (proposal.id, "bold"),
        f" {proposal.tool} failed: ",
        (result.error or "", tone("bad")),
    )
