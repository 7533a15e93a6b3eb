"""What an MCP server asks of diana while connected: its roots (roots/list), a person's
answer (elicitation, in a form or as a page to open), the local model's reply (sampling), and
pages a call needs opened first (-32042). Each is answered by whoever the manager gave the
connection, or refused in words the server passes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.client.session import ClientRequestContext

from ..llm.sampling import SamplingRefused
from ..models import ErrorCode, ToolResult
from .elicitation_form import Answer, Elicitation, UnshowableRequest, fields_of


class ServerRequests:
    """Answers one server's requests: ``roots`` gives its roots as configured now (URI,
    name); ``on_elicit`` asks a person; ``on_sample`` decides and runs a sampling request
    (None: sampling is not offered); ``emit`` writes to the structured log."""

    def __init__(
        self,
        server: str,
        *,
        roots: Callable[[], list[tuple[str, str]]],
        on_elicit: Callable[[Elicitation], Awaitable[Answer]] | None,
        on_sample: Callable[[dict[str, Any]], Awaitable[ToolResult]] | None,
        emit: Callable[..., None],
    ) -> None:
        self.name = server
        self._roots = roots
        self._on_elicit = on_elicit  # who answers what the server asks a person
        self._on_sample = on_sample  # who decides and runs what it asks the local model
        self._emit = emit

    @property
    def samples(self) -> bool:
        """Whether the server is offered sampling (someone decides its requests)."""
        return self._on_sample is not None

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        roots = [
            types.Root.model_validate({"uri": uri, "name": name}) for uri, name in self._roots()
        ]
        return types.ListRootsResult(roots=roots)

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The server asks the person something, inside a call (or a read)."""
        if isinstance(params, types.ElicitRequestURLParams):
            request = Elicitation(self.name, params.message, "url", url=params.url)
        else:
            try:
                fields = fields_of(params.requested_schema)
            except UnshowableRequest as exc:
                self._emit("mcp.elicitation_refused", "warning", server=self.name, error=str(exc))
                return types.ErrorData(
                    code=types.INVALID_PARAMS, message=f"diana cannot show this as a form: {exc}"
                )
            request = Elicitation(self.name, params.message, "form", fields)
        if self._on_elicit is None:
            return types.ElicitResult(action="decline")
        try:
            answer = await self._on_elicit(request)
        except ValueError as exc:  # an answer that does not fit the form: not sent
            self._emit("mcp.elicitation_refused", "warning", server=self.name, error=str(exc))
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action=answer.action, content=answer.content)

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        """The server asks the local model to write a reply: a call of mcp_sampling, which a
        person approves unless policy.json allows this server's sampling."""
        assert self._on_sample is not None  # declared only with someone to decide
        try:
            arguments = sampling_arguments(self.name, params)
        except SamplingRefused as exc:
            self._emit("mcp.sampling_refused", "warning", server=self.name, error=str(exc))
            return types.ErrorData(
                code=types.INVALID_PARAMS, message=f"diana cannot ask the local model: {exc}"
            )
        result = await self._on_sample(arguments)
        if not result.success:
            # -1: the person said no (what MCP's examples use for a refused sampling request)
            code = -1 if result.error_code is ErrorCode.REJECTED else types.INTERNAL_ERROR
            return types.ErrorData(code=code, message=result.error or "sampling failed")
        data = result.data
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=data["text"]),
            model=data["model"],
            stop_reason=data["stop_reason"],
        )

    async def open_urls_first(self, error: types.ErrorData) -> str | None:
        """A call answered "open this page first" (-32042): each page is put to the person
        as a URL elicitation. None when all were done; otherwise why the call cannot go on."""
        from mcp.shared.exceptions import UrlElicitationRequiredError

        try:
            pages = UrlElicitationRequiredError.from_error(error).elicitations
        except ValueError as exc:
            return f"the server asked for pages to be opened, but not readably: {exc}"
        if not pages:
            return "the server asked for pages to be opened, but named none"
        for page in pages:
            request = Elicitation(self.name, page.message, "url", url=page.url)
            answer = (
                Answer("decline") if self._on_elicit is None else await self._on_elicit(request)
            )
            if answer.action != "accept":
                return (
                    f"MCP server {self.name} needs {page.url} opened first ({page.message}); "
                    f"it was {'declined' if answer.action == 'decline' else 'cancelled'}"
                )
        return None


def sampling_arguments(server: str, params: types.CreateMessageRequestParams) -> dict[str, Any]:
    """A sampling request as the arguments of mcp_sampling: text and images only (raises
    SamplingRefused for audio, tool use, or a request for tools diana did not offer)."""
    if params.tools:
        raise SamplingRefused("it offers the model tools, which diana does not take in sampling")
    messages: list[dict[str, Any]] = []
    for message in params.messages:
        texts: list[str] = []
        images: list[dict[str, str]] = []
        for block in message.content_as_list:
            if isinstance(block, types.TextContent):
                texts.append(block.text)
            elif isinstance(block, types.ImageContent):
                images.append({"mimeType": block.mime_type, "data": block.data})
            else:
                raise SamplingRefused(f"a message holds {block.type} content, which it cannot read")
        entry: dict[str, Any] = {"role": message.role, "text": "\n".join(texts)}
        if images:
            entry["images"] = images
        messages.append(entry)
    if not messages:
        raise SamplingRefused("the request has no messages")
    hints = params.model_preferences.hints if params.model_preferences else None
    arguments: dict[str, Any] = {
        "server": server,
        "messages": messages,
        "system_prompt": params.system_prompt,
        "reply_limit": params.max_tokens,
        "model_hints": [hint.name for hint in hints or [] if hint.name],
    }
    if params.temperature is not None:
        arguments["temperature"] = params.temperature
    if params.stop_sequences:
        arguments["stop_sequences"] = params.stop_sequences
    return arguments
