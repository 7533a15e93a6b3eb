"""What servers ask a person through `diana`, on a real terminal (a pty): two servers asking
at once are asked one after the other, each answer reaching the request it was typed for;
each field's description is shown under its title; and however a question ends (answered,
its time run out, the terminal's end, Ctrl-C, SIGTERM) the terminal shows typing again."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from .commands import diana_argv
from .fixtures.fake_ollama import FakeOllama
from .terminal import Terminal
from .waits import until

pytestmark = pytest.mark.processes

ASKING = str(Path(__file__).parent / "fixtures" / "asking_server.py")


class Servers:
    """Two servers that ask on their own (a and b), each when the test lets it go."""

    def __init__(self, tmp_path: Path, config_dir: Path, **b_fields: Any) -> None:
        self.records = {name: tmp_path / f"{name}.record" for name in ("a", "b")}
        self.done = tmp_path / "done"
        servers = {
            name: {"command": sys.executable, "args": [ASKING, name, str(record)]}
            for name, record in self.records.items()
        }
        servers["b"].update(b_fields)
        (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))

    def let_ask(self, name: str) -> None:
        record = self.records[name]
        record.with_name(record.name + ".go").touch()

    def has_asked(self, name: str) -> bool:
        record = self.records[name]
        return record.exists() and "sent" in record.read_text().split()

    def answer_of(self, name: str) -> dict[str, Any]:
        """The answer the server got; {} before it got one."""
        record = self.records[name]
        lines = record.read_text().splitlines() if record.exists() else []
        answered = [json.loads(line) for line in lines if line != "sent"]
        return answered[-1] if answered else {}


def asking(config_dir: Path, data_dir: Path, fake: FakeOllama, servers: Servers) -> Terminal:
    """`diana ask` on a terminal, its turn held by a call that ends when the test says so."""
    fake.add(
        {"tool_calls": [{"name": "a_hold", "arguments": {"path": str(servers.done)}}]},
        {"content": "Noted."},
    )
    argv = diana_argv(config_dir, data_dir, "ask", "who am I?")
    return Terminal(argv, dict(os.environ, OLLAMA_HOST=fake.url))


A_ASKS = "? MCP server a asks: a needs to know who you are\n"
B_ASKS = "? MCP server b asks: b needs to know who you are\n"
PASSPHRASE = "  Passphrase (string): "
NAME = "  Name (string)\n    Your full, legal name\n  > "
SEND = "  send it? [y]es / [n]o (decline) / [c]ancel (Enter): "


def answer(terminal: Terminal, passphrase: str, name: str) -> None:
    terminal.wait_for(PASSPHRASE)
    terminal.type(passphrase)
    terminal.wait_for(NAME)
    terminal.type(name)
    terminal.wait_for(SEND)
    terminal.type("y")


def test_two_servers_asking_at_once_are_asked_one_after_the_other(
    tmp_path: Path, config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    servers = Servers(tmp_path, config_dir)
    terminal = asking(config_dir, data_dir, fake, servers)
    try:
        servers.let_ask("a")
        terminal.wait_for(A_ASKS)
        servers.let_ask("b")  # b asks while a's question is on the terminal
        until(lambda: servers.has_asked("b"))
        answer(terminal, "open sesame", "Ada Lovelace")
        terminal.wait_for(B_ASKS)  # b's turn comes once a's request is answered whole
        answer(terminal, "swordfish", "Grace Hopper")
        until(lambda: servers.answer_of("b").get("action") == "accept")
        assert terminal.echoes()
        servers.done.touch()
        out, _ = terminal.process.communicate(timeout=60)
    finally:
        terminal.close()
    assert terminal.process.returncode == 0, terminal.shown
    assert out == "Noted.\n"
    assert servers.answer_of("a") == {
        "action": "accept",
        "content": {"passphrase": "open sesame", "name": "Ada Lovelace"},
    }
    assert servers.answer_of("b") == {
        "action": "accept",
        "content": {"passphrase": "swordfish", "name": "Grace Hopper"},
    }
    shown = terminal.shown
    a_sent = shown.index(SEND)
    assert shown.index(B_ASKS) > a_sent  # nothing of b's was shown inside a's questions
    assert shown.count("? MCP server") == 2
    assert "open sesame" not in shown and "swordfish" not in shown  # secrets not echoed
    assert "Ada Lovelace" in shown


def test_a_question_whose_time_runs_out_gives_the_terminal_to_the_next(
    tmp_path: Path, config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    """b has 2 s to be answered; its passphrase, typed unseen, is left unanswered."""
    servers = Servers(tmp_path, config_dir, toolTimeout=2)
    terminal = asking(config_dir, data_dir, fake, servers)
    try:
        servers.let_ask("b")
        terminal.wait_for(B_ASKS + PASSPHRASE)
        until(lambda: not terminal.echoes())  # typing a secret: not shown
        servers.let_ask("a")
        until(lambda: servers.has_asked("a"))
        terminal.wait_for("\n  (MCP server b no longer waits for this answer)\n")
        terminal.wait_for(A_ASKS)
        answer(terminal, "open sesame", "Ada Lovelace")
        until(lambda: servers.answer_of("a").get("action") == "accept")
        assert terminal.echoes()
        servers.done.touch()
        terminal.process.communicate(timeout=60)
    finally:
        terminal.close()
    assert terminal.process.returncode == 0, terminal.shown
    assert servers.answer_of("b") == {"action": "cancel"}
    assert servers.answer_of("a")["content"] == {
        "passphrase": "open sesame",
        "name": "Ada Lovelace",
    }


@pytest.mark.parametrize("how", ["end of input", "SIGINT", "SIGTERM"])
def test_however_a_secret_question_ends_typing_is_shown_again(
    tmp_path: Path, config_dir: Path, data_dir: Path, fake: FakeOllama, how: str
) -> None:
    """Ctrl-D ends the terminal's input; Ctrl-C is SIGINT (sent as kill -INT: the pty is not
    the command's controlling terminal); SIGTERM is the command being told to stop."""
    servers = Servers(tmp_path, config_dir)
    terminal = asking(config_dir, data_dir, fake, servers)
    try:
        servers.let_ask("a")
        terminal.wait_for(PASSPHRASE)
        until(lambda: not terminal.echoes())
        if how == "end of input":
            terminal.end_input()
            until(lambda: servers.answer_of("a") == {"action": "cancel"})
            assert terminal.echoes()
            servers.done.touch()
            terminal.process.communicate(timeout=60)
            assert terminal.process.returncode == 0, terminal.shown
        else:
            terminal.process.send_signal(getattr(signal, how))
            _out, _ = terminal.process.communicate(timeout=60)
            assert terminal.process.returncode == 130, terminal.shown
            until(lambda: "diana: interrupted" in terminal.shown)
        assert terminal.echoes()
    finally:
        terminal.close()
    assert "Traceback" not in terminal.shown
