"""A server asks the person something (MCP elicitation): a form in the app, questions on the
terminal for `diana`, declined when there is nobody to ask; what cannot be shown as a form is
refused naming the property; answers are checked before they are sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from diana.core.mcp.elicitation_form import (
    Answer,
    Elicitation,
    Elicitations,
    UnshowableRequest,
    check_answer,
    fields_of,
)
from diana.core.models import ErrorCode
from diana.core.ports import Ports
from diana.core.runtime import Profile, Runtime
from diana.core.system.telemetry import StructuredLog
from diana.tui.modals.elicitation import ElicitationScreen
from textual.widgets import Input, Static

from .commands import diana, diana_argv
from .conftest import stepping_clock
from .scenarios import app_of, build_app, fixture_server, settle, until
from .terminal import Terminal

BOOKING_SERVER = {"fx": fixture_server("--host-tools")}


def allow_booking(config_dir: Path) -> None:
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"fx_book": "allow"}}))


def test_what_no_form_can_show_is_refused_naming_the_property() -> None:
    with pytest.raises(UnshowableRequest, match="property 'address' is of type 'object'"):
        fields_of({"type": "object", "properties": {"address": {"type": "object"}}})
    fields = fields_of(
        {
            "type": "object",
            "properties": {
                "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
                "when": {"type": "string", "format": "date"},
            },
            "required": ["size"],
        }
    )
    assert [(f.name, f.kind, f.required) for f in fields] == [
        ("size", "choice", True),
        ("count", "integer", False),
        ("when", "string", False),
    ]
    assert check_answer(fields, {"size": "Large", "count": "3"}) == {"size": "l", "count": 3}
    for content, problem in (
        ({}, "size: required"),
        ({"size": "xl"}, "size: choose from Small, Large"),
        ({"size": "s", "count": "9"}, "count: must be at most 5"),
        ({"size": "s", "when": "soon"}, "when: must be a date"),
    ):
        with pytest.raises(ValueError, match=problem):
            check_answer(fields, content)


async def test_the_log_has_what_was_asked_and_answered_but_no_secret(tmp_path: Path) -> None:
    log = StructuredLog(tmp_path / "log.jsonl", stepping_clock())
    request = Elicitation(
        "fx",
        "Sign in",
        "form",
        fields_of({"properties": {"user": {"type": "string"}, "password": {"type": "string"}}}),
    )

    async def person(_request: Elicitation) -> Answer:
        return Answer("accept", {"user": "ada", "password": "hunter2-long"})

    elicitations = Elicitations(log, asker=person)
    answer = await elicitations.ask(request, 5)
    assert answer.content == {"user": "ada", "password": "hunter2-long"}  # sent as typed
    log.close()
    text = (
        (tmp_path / "log.jsonl").read_text()
        if (tmp_path / "log.jsonl").exists()
        else "".join(p.read_text() for p in tmp_path.glob("log*.jsonl"))
    )
    assert '"elicitation.answered"' in text and '"user": "ada"' in text
    assert "hunter2-long" not in text


@pytest.mark.processes
async def test_the_app_asks_in_a_form_and_sends_what_was_filled_in(tmp_path: Path) -> None:
    app = build_app(tmp_path, BOOKING_SERVER)
    allow_booking(app.paths.config_dir)
    async with app.run_test(size=(100, 35)) as pilot:
        await settle(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        call = asyncio.create_task(runtime.call_tool("fx_book", {}, origin="test"))
        await until(lambda: isinstance(app.screen, ElicitationScreen), within=20)
        await pilot.pause()
        form = app.screen
        assert form.box.border_title == "MCP server fx asks"
        assert form.query_one("#elicit-1", Input).value == "2"  # the default, filled in
        await pilot.press("ctrl+s")  # the required name is empty: the form stays
        await pilot.pause()
        assert "Name: required" in str(form.query_one("#elicit-error", Static).render())
        form.query_one("#elicit-0", Input).value = "Ada"
        await pilot.press("ctrl+s")
        result = await asyncio.wait_for(call, 20)
        assert result.data == "booked Ada for 2 nights, breakfast False"

        call = asyncio.create_task(runtime.call_tool("fx_book", {}, origin="test"))
        await until(lambda: isinstance(app.screen, ElicitationScreen), within=20)
        await pilot.press("ctrl+r")
        assert (await asyncio.wait_for(call, 20)).data == "not booked: decline"


@pytest.mark.processes
def test_diana_asks_on_its_terminal(config_dir: Path, data_dir: Path) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": BOOKING_SERVER}))
    allow_booking(config_dir)
    terminal = Terminal(diana_argv(config_dir, data_dir, "call", "fx_book"))
    try:
        terminal.wait_for("? MCP server fx asks: Details for the booking?")
        for prompt, answer in (
            ("Name (string): ", "Ada"),
            ("Nights (integer, optional) [2]: ", "many"),
            ("must be a whole number", "3"),
            ("Breakfast (boolean, optional) [no]: ", "y"),
            ("send it? [y]es / [n]o (decline) / [c]ancel (Enter): ", "y"),
        ):
            terminal.wait_for(prompt)
            terminal.type(answer)
        out, _ = terminal.process.communicate(timeout=60)
    finally:
        terminal.close()
    assert terminal.process.returncode == 0
    assert out == "booked Ada for 3 nights, breakfast True\n"


@pytest.mark.processes
def test_without_a_terminal_the_request_is_declined_and_said_so(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": BOOKING_SERVER}))
    allow_booking(config_dir)
    done = diana(config_dir, data_dir, "call", "fx_book")  # stdin is not a terminal
    assert (done.returncode, done.stdout) == (0, "not booked: decline\n")
    assert done.stderr == (
        "diana: MCP server fx asked: Details for the booking?\n"
        "diana: declined: there is no terminal to ask on\n"
    )


def test_several_choices_are_read_by_title_or_value_within_their_bounds() -> None:
    """As server-everything asks: a list of choices with titles, one to three of them."""
    (fish,) = fields_of(
        {
            "properties": {
                "fish": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2,
                    "items": {
                        "anyOf": [
                            {"const": "fish-1", "title": "Tuna"},
                            {"const": "fish-2", "title": "Salmon"},
                            {"const": "fish-3", "title": "Trout"},
                        ]
                    },
                    "default": ["fish-1"],
                }
            }
        }
    )
    assert fish.kind == "choices" and fish.default == ["fish-1"]
    assert check_answer([fish], {"fish": "Tuna, fish-3"}) == {"fish": ["fish-1", "fish-3"]}
    assert check_answer([fish], {"fish": ["fish-2"]}) == {"fish": ["fish-2"]}  # from a form
    for typed, problem in (("Tuna, Salmon, Trout", "at most 2"), ("Carp", "choose from")):
        with pytest.raises(ValueError, match=problem):
            check_answer([fish], {"fish": typed})
    with pytest.raises(UnshowableRequest, match="property 'tags' is a list"):
        fields_of({"properties": {"tags": {"type": "array", "items": {"type": "string"}}}})


@pytest.mark.processes
async def test_a_page_the_server_needs_opened_first_is_asked_then_the_call_is_made_again(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": BOOKING_SERVER}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))
    asked: list[Elicitation] = []

    async def person(request: Elicitation, action: str) -> Answer:
        asked.append(request)
        return Answer(action)  # type: ignore[arg-type]

    declines = Ports(answer_server=lambda request: person(request, "decline"))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        ports=declines,
    ) as runtime:
        await runtime.mcp.wait_ready()
        refused = await runtime.call_tool("fx_open_page_first", {}, origin="test")
        assert refused.error_code is ErrorCode.REJECTED
        assert "needs https://archive.example/consent opened first" in (refused.error or "")
        assert "declined" in (refused.error or "")
        assert [(a.mode, a.url) for a in asked] == [("url", "https://archive.example/consent")]

    accepts = Ports(answer_server=lambda request: person(request, "accept"))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        ports=accepts,
    ) as runtime:
        await runtime.mcp.wait_ready()
        done = await runtime.call_tool("fx_open_page_first", {}, origin="test")
        assert done.data == "the archive is open"
        assert asked[-1].message == "Sign in to the archive"
