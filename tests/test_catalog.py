"""Resources and prompts of MCP servers, from the command line: listed, read, fetched, with
what goes wrong said in one line and nothing waiting past the server's time limit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from diana.core.runtime import Profile, Runtime

from .commands import diana_here
from .configs import write_servers
from .conftest import stepping_clock
from .scenarios import build_app, fixture_server, settle, until

pytestmark = pytest.mark.processes  # every test here starts a process

PNG_SIZE = 67  # the fixture's 1x1 PNG


def test_resources_and_templates_of_every_server_are_listed(
    config_dir: Path, data_dir: Path
) -> None:
    write_servers(config_dir, {"fx": fixture_server(), "gone": {"command": "no-such-cmd-xyz"}})
    listed = diana_here(config_dir, data_dir, "resources", "--json")
    assert listed.returncode == 1  # one server could not be asked, and said so
    assert listed.stderr.startswith("diana: MCP server gone is not connected: command not found")
    resources = {r["uri"]: r for r in json.loads(listed.stdout)}
    assert resources["fixture://greeting"] == {
        "server": "fx",
        "uri": "fixture://greeting",
        "name": "greeting",
        "mimeType": "text/plain",
        "description": "A short text.",
    }
    assert resources["fixture://items/{item}"]["template"] is True
    table = diana_here(config_dir, data_dir, "resources", "fx")
    assert table.returncode == 0
    assert "fixture://items/{item} (template)" in table.stdout


def test_a_resource_is_shown_by_its_kind_and_saved_to_a_file(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    write_servers(config_dir, {"fx": fixture_server()})
    text = diana_here(config_dir, data_dir, "read", "fx", "fixture://items/abc")
    assert (text.returncode, text.stdout) == (0, "item abc\n")
    pretty = diana_here(config_dir, data_dir, "read", "fx", "fixture://settings.json")
    assert json.loads(pretty.stdout) == {"theme": "dark", "sizes": [80, 120]}
    assert '  "theme": "dark"' in pretty.stdout  # indented, not as the server sent it
    binary = diana_here(config_dir, data_dir, "read", "fx", "fixture://pixel.png")
    assert (
        binary.stdout == f"fixture://pixel.png: image/png, {PNG_SIZE} bytes (--out FILE saves it)\n"
    )
    out = tmp_path / "pixel.png"
    saved = diana_here(config_dir, data_dir, "read", "fx", "fixture://pixel.png", "--out", str(out))
    assert saved.returncode == 0 and out.read_bytes().startswith(b"\x89PNG")
    as_json = json.loads(
        diana_here(config_dir, data_dir, "read", "fx", "fixture://pixel.png", "--json").stdout
    )
    assert as_json[0]["size"] == PNG_SIZE and as_json[0]["mimeType"] == "image/png"

    fifo, link = tmp_path / "fifo", tmp_path / "link"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere")
    for target, why in (
        (fifo, "is a FIFO (named pipe), not a regular file"),
        (link, "is a symbolic link; name the file itself"),
    ):
        refused = diana_here(
            config_dir, data_dir, "read", "fx", "fixture://greeting", "--out", str(target)
        )
        assert (refused.returncode, refused.stderr) == (2, f"diana: --out {target} {why}\n")
    assert not (tmp_path / "elsewhere").exists()


def test_a_resource_that_fails_or_never_arrives_is_one_line(
    config_dir: Path, data_dir: Path
) -> None:
    write_servers(config_dir, {"fx": fixture_server(toolTimeout=1)})
    missing = diana_here(config_dir, data_dir, "read", "fx", "fixture://nope")
    assert (missing.returncode, missing.stderr) == (
        1,
        "diana: MCP server fx refused reading fixture://nope: Unknown resource: fixture://nope\n",
    )
    slow = diana_here(config_dir, data_dir, "read", "fx", "fixture://slow")
    assert (slow.returncode, slow.stderr) == (
        1,
        "diana: MCP server fx did not answer reading fixture://slow within 1 s\n",
    )
    unknown = diana_here(config_dir, data_dir, "read", "nosuch", "x")
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "diana: no MCP server named nosuch (configured: fx)\n",
    )


def test_prompts_are_listed_and_fetched_with_their_arguments_checked_first(
    config_dir: Path, data_dir: Path
) -> None:
    write_servers(config_dir, {"fx": fixture_server()})
    listed = json.loads(diana_here(config_dir, data_dir, "prompts", "--json").stdout)
    review = next(p for p in listed if p["name"] == "review")
    assert review["arguments"] == [
        {"name": "code", "description": None, "required": True},
        {"name": "focus", "description": None, "required": False},
    ]
    table = diana_here(config_dir, data_dir, "prompts").stdout
    assert "review  code, focus?" in table

    got = diana_here(config_dir, data_dir, "prompt", "fx", "review", "--arg", "code=x = 1")
    assert (got.returncode, got.stdout) == (0, "user: Review this code for bugs:\nx = 1\n")
    as_json = json.loads(diana_here(config_dir, data_dir, "prompt", "fx", "hello", "--json").stdout)
    assert as_json["messages"] == [{"role": "user", "text": "Say hello."}]

    for args, said in (
        (("review",), "diana: prompt review needs code (give each as --arg NAME=VALUE)\n"),
        (
            ("review", "--arg", "code=1", "--arg", "zip=2"),
            "diana: prompt review has no argument 'zip' (it takes: code, focus) "
            "(give each as --arg NAME=VALUE)\n",
        ),
        (("review", "--arg", "code"), "diana: --arg 'code': write it as NAME=VALUE\n"),
        (("nosuch",), "diana: MCP server fx has no prompt nosuch (it has: review, hello)\n"),
    ):
        refused = diana_here(config_dir, data_dir, "prompt", "fx", *args)
        assert (refused.returncode, refused.stderr) == (2, said), args


async def test_a_prompt_argument_is_completed_by_the_server(
    config_dir: Path, data_dir: Path
) -> None:
    from diana.core.mcp.catalog import complete_argument

    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"files": fixture_server()}})
    )
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        connection = await runtime.mcp.connected("files")
        assert await complete_argument(connection, "review", "focus", "s", {}) == [
            "security",
            "style",
        ]
        assert await complete_argument(connection, "review", "code", "x", {}) == []


async def test_the_prompt_form_and_the_chat_input_complete_as_you_type(tmp_path: Path) -> None:
    from diana.tui.modals.elicitation import ElicitationScreen
    from textual.widgets import Input

    app = build_app(tmp_path, {"files": fixture_server()})
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        chat_input = app.query_one("#chat-input", Input)
        chat_input.focus()
        await pilot.press(*"read @fi")
        await until(lambda: chat_input._suggestion == "read @files:", within=10)
        await pilot.press("right", *"fixture://gr")
        await until(lambda: chat_input._suggestion == "read @files:fixture://greeting", within=10)
        # `/` completes a command's name, a server's, then one of its prompts.
        chat_input.value = ""
        await pilot.press("slash", "h", "e")
        await until(lambda: chat_input._suggestion == "/help", within=10)
        chat_input.value = ""
        await pilot.press("slash", "f", "i")
        await until(lambda: chat_input._suggestion == "/files:", within=10)
        await pilot.press("right", "r", "e")
        await until(lambda: chat_input._suggestion == "/files:review", within=10)
        chat_input.value = "/files:review"
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, ElicitationScreen), within=20)
        focus = app.screen.query_one("#elicit-1", Input)
        focus.focus()
        focus.value = ""
        await pilot.press("s", "e")
        await until(lambda: focus._suggestion == "security", within=10)
