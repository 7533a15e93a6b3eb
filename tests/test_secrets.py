"""Secrets by value: what is configured as secret (a server's env and header values, a password
in its URL) is never stored or shown, whichever way it comes back; secret-named arguments are
kept in full only while the call may still run."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from core.mcp.config import parse_servers
from core.runtime import Runtime
from core.telemetry import SECRET_VALUES, is_secret_name, redact

from .commands import diana
from .conftest import stepping_clock

GATE_SERVER = str(Path(__file__).parent / "fixtures" / "gate_server.py")
TOKEN = "tok-7f3a9c51e2"  # the configured secret
KEY = "key-88d1b2c4"  # a secret passed as a secret-named argument


def configure(config_dir: Path, tmp_path: Path) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "gate": {
                        "command": sys.executable,
                        "args": [
                            GATE_SERVER,
                            "--side-effects",
                            str(tmp_path / "effects.txt"),
                            "--print-env",
                            "API_TOKEN",
                        ],
                        "env": {"API_TOKEN": TOKEN},
                    }
                }
            }
        )
    )


def everything_stored(data_dir: Path) -> bytes:
    """Every byte diana keeps in its data dir: the database (and its WAL) and the logs."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())


def test_configured_values_are_masked_wherever_they_are_shown_or_logged() -> None:
    parse_servers(
        [
            {
                "name": "remote",
                "url": "https://me:pa55word-x@example.org/mcp",
                "headers": {"Authorization": "Bearer hdr-value-1"},
            },
        ],
        Path("mcp-servers.json"),
    )

    assert redact({"said": "Bearer hdr-value-1 and pa55word-x"}) == {"said": "*** and ***"}
    assert SECRET_VALUES.mask("a pa55word-xyz") == "a ***yz"


@pytest.mark.slow
def test_a_secret_a_server_returns_is_not_stored_or_shown(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, tmp_path)

    called = diana(config_dir, data_dir, "call", "gate_get_env", "--args", '{"name": "API_TOKEN"}')
    logged = diana(config_dir, data_dir, "log", "--json")
    servers = diana(config_dir, data_dir, "servers", "--json")

    assert called.returncode == 0, called.stderr
    assert called.stdout.strip() == "***"
    assert TOKEN not in logged.stdout
    assert json.loads(logged.stdout)[-1]["result"] == "***"
    (gate,) = json.loads(servers.stdout)
    assert "starting with API_TOKEN=***" in gate["stderr_tail"]  # the server printed it
    assert TOKEN not in servers.stdout + servers.stderr
    assert TOKEN.encode() not in everything_stored(data_dir)


@pytest.mark.slow
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_secret_arguments_are_kept_only_while_the_call_may_run(
    config_dir: Path, data_dir: Path, tmp_path: Path, decision: str
) -> None:
    configure(config_dir, tmp_path)
    made = diana(
        config_dir,
        data_dir,
        "call",
        "gate_append_line",
        "--args",
        json.dumps({"line": "with a key", "api_key": KEY}),
    )
    proposal_id = made.stdout.split()[-1]
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        (pending,) = db.execute("SELECT arguments FROM proposals").fetchone()

    decided = diana(config_dir, data_dir, decision, proposal_id)

    assert decided.returncode == 0, decided.stderr
    assert json.loads(pending)["api_key"] == KEY  # what runs when it is approved
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        (settled,) = db.execute("SELECT arguments FROM proposals").fetchone()
    assert json.loads(settled) == {"line": "with a key", "api_key": "***"}
    assert KEY.encode() not in everything_stored(data_dir).replace(pending.encode(), b"")


async def test_a_server_printing_its_secret_keeps_it_out_of_its_stderr_tail(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, tmp_path)
    runtime = await Runtime.open(config_dir, data_dir, clock=stepping_clock())
    try:
        await runtime.mcp.wait_ready()
        shown = runtime.mcp.diagnostics("gate")
    finally:
        await runtime.close()

    assert "starting with API_TOKEN=***" in shown.stderr_tail
    assert TOKEN not in json.dumps(shown.public())


# Masking by name: a count of tokens is not a token, and only text can be a secret.
SHOWN_NAMES = [
    "maxTokens",
    "max_tokens",
    "token_count",
    "tokenCount",
    "tokens",
    "prompt_tokens",
    "num_tokens",
    "secret_name",
    "auth_method",
    "AWS_ACCESS_KEY_ID",
    "sort_key",
    "key",
    "author",
    "monkey_count",
]
MASKED_NAMES = [
    "token",
    "api_token",
    "access_token",
    "refreshToken",
    "idToken",
    "apiKey",
    "X-API-Key",
    "password",
    "client_secret",
    "Authorization",
    "Cookie",
    "accesstoken",
]


@pytest.mark.parametrize("name", SHOWN_NAMES)
def test_a_name_about_a_secret_or_no_secret_at_all_shows_its_value(name: str) -> None:
    assert not is_secret_name(name)
    assert redact({name: "7 of them", "count": {name: 50}}) == {
        name: "7 of them",
        "count": {name: 50},
    }


@pytest.mark.parametrize("name", MASKED_NAMES)
def test_a_name_that_holds_a_secret_hides_its_text(name: str) -> None:
    assert is_secret_name(name)
    assert redact({name: "s3cr3t-value", "nested": [{name: "s3cr3t-value"}]}) == {
        name: "***",
        "nested": [{name: "***"}],
    }


def test_only_text_is_ever_a_secret_by_its_name() -> None:
    given = {"password": 1234, "api_key": True, "token": None, "credentials": {"user": "ada"}}
    assert redact(given) == given
    assert redact({"cookies": ["a-cookie", "b-cookie"]}) == {"cookies": ["***", "***"]}


SUMMARIZE = {
    "name": "summarize",
    "description": "Summarise a text.",
    "script": "summarize.py",
    "risk": "irreversible",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "maxTokens": {"type": "integer"},
            "api_token": {"type": "string"},
        },
        "required": ["text", "maxTokens"],
    },
}


@pytest.mark.slow
async def test_a_person_sees_every_value_they_approve_and_no_secret(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "tools").mkdir()
    (config_dir / "tools" / "summarize.py").write_text("def run(arguments):\n    return 'ok'\n")
    (config_dir / "tools.json").write_text(json.dumps({"tools": [SUMMARIZE]}))
    arguments = {"text": "a long text", "maxTokens": 7, "api_token": KEY}

    held = diana(config_dir, data_dir, "call", "summarize", "--args", json.dumps(arguments))
    proposal_id = held.stdout.split()[-1]
    shown = diana(config_dir, data_dir, "show", proposal_id)
    listed = diana(config_dir, data_dir, "proposals", "--json")
    async with await Runtime.open(config_dir, data_dir, mcp=False, chat=False) as runtime:
        proposal = await runtime.approvals.store.get(proposal_id)

    assert held.returncode == 3, held.stderr  # held for a person
    assert '"maxTokens": 7' in shown.stdout and KEY not in shown.stdout
    assert json.loads(listed.stdout)[0]["arguments"] == {
        "text": "a long text",
        "maxTokens": 7,
        "api_token": "***",
    }
    # What the Approvals pane and the inline prompt show.
    assert '"maxTokens": 7' in proposal.summary and KEY not in proposal.summary
