"""Secrets by value: what is configured as secret (a server's env and header values, a password
in its URL) and what a sign-in obtained (OAuth tokens, a registered client's secret) is never
stored or shown, whichever way it comes back; a configured client secret is read from the
config, never copied. Secrets by name: only text under a name that really holds a secret is
masked (a count of tokens is not a token), and such arguments are kept in full only while the
call may still run."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from diana.core.calls import tracing
from diana.core.calls.tracing import Tracing
from diana.core.config.mcp_servers import parse_servers
from diana.core.config.settings import ConfigError
from diana.core.events import CallProgress, EventBus, ServerStatusChanged
from diana.core.mcp.tokens import remember_kept_tokens
from diana.core.runtime import Profile, Runtime
from diana.core.system.telemetry import SECRET_VALUES, is_secret_name, redact
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .browsers import BROWSER
from .commands import diana_here, diana_here_async
from .conftest import stepping_clock
from .oauth_guard import Guarded
from .oauth_guard import configure as configure_guarded
from .oauth_guard import run as run_oauth

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


def diana_anew(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`diana ARGS` through its ``main(argv)`` here, with $BROWSER a headless browser that
    follows a sign-in."""
    return diana_here(config_dir, data_dir, *args, env={"BROWSER": BROWSER})


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


def test_a_secret_is_what_its_name_or_the_entry_says_not_every_configured_value() -> None:
    parse_servers(
        [
            {
                "name": "db",
                "command": "db-server",
                "args": ["--password-file", "pw-arg-5551", "--mode", "true"],
                "env": {"READ_ONLY": "true", "DB_PASSWORD": "dbpw-1234", "PLAIN": "marked-77"},
                "secrets": ["args[1]", "PLAIN"],  # what the entry marks secret
            },
            {
                "name": "remote",
                "url": "https://example.org/mcp",
                "headers": {
                    "Authorization": "Bearer az-1234",
                    "Cookie": "ck-9876",
                    "Accept": "json",
                },
            },
        ],
        Path("mcp-servers.json"),
    )
    # A plain setting's value stays itself wherever the same text shows.
    assert SECRET_VALUES.mask("true json example.org") == "true json example.org"
    said = "dbpw-1234 pw-arg-5551 marked-77 Bearer az-1234 ck-9876"
    assert SECRET_VALUES.mask(said) == "*** *** *** *** ***"  # the header value whole


def test_a_secret_mark_names_something_the_entry_has() -> None:
    for marked, said in (("args[3]", "past the last argument"), ("NOPE", '"NOPE" is no env')):
        with pytest.raises(ConfigError, match=f"secrets\\[0\\]: .*{said}"):
            parse_servers(
                [{"name": "x", "command": "x", "args": ["a"], "secrets": [marked]}],
                Path("mcp-servers.json"),
            )


@pytest.mark.processes
def test_a_plain_setting_leaves_json_output_whole(config_dir: Path, data_dir: Path) -> None:
    time_server = str(Path(sys.executable).parent / "mcp-server-time")
    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"t": {"command": time_server, "env": {"READ_ONLY": "true"}}}})
    )
    listed = diana_anew(config_dir, data_dir, "servers", "--json")
    assert listed.returncode == 0, listed.stderr
    (server,) = json.loads(listed.stdout)  # a true in it is still true, not ***
    assert server["name"] == "t" and server["env"] == ["READ_ONLY"]


@pytest.mark.processes
def test_a_secret_a_server_returns_is_not_stored_or_shown(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, tmp_path)

    called = diana_anew(
        config_dir, data_dir, "call", "gate_get_env", "--args", '{"name": "API_TOKEN"}'
    )
    logged = diana_anew(config_dir, data_dir, "log", "--json")
    servers = diana_anew(config_dir, data_dir, "servers", "--json")

    assert called.returncode == 0, called.stderr
    assert called.stdout.strip() == "***"
    assert TOKEN not in logged.stdout
    assert json.loads(logged.stdout)[-1]["result"] == "***"
    (gate,) = json.loads(servers.stdout)
    assert "starting with API_TOKEN=***" in gate["stderr_tail"]  # the server printed it
    assert TOKEN not in servers.stdout + servers.stderr
    assert TOKEN.encode() not in everything_stored(data_dir)


@pytest.mark.processes
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_secret_arguments_are_kept_only_while_the_call_may_run(
    config_dir: Path, data_dir: Path, tmp_path: Path, decision: str
) -> None:
    configure(config_dir, tmp_path)
    made = diana_anew(
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

    decided = diana_anew(config_dir, data_dir, decision, proposal_id)

    assert decided.returncode == 0, decided.stderr
    assert json.loads(pending)["api_key"] == KEY  # what runs when it is approved
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        (settled,) = db.execute("SELECT arguments FROM proposals").fetchone()
    assert json.loads(settled) == {"line": "with a key", "api_key": "***"}
    assert KEY.encode() not in everything_stored(data_dir).replace(pending.encode(), b"")


@pytest.mark.processes
async def test_a_server_printing_its_secret_keeps_it_out_of_its_stderr_tail(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, tmp_path)
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    try:
        await runtime.mcp.wait_ready()
        shown = runtime.mcp.diagnostics("gate")
    finally:
        await runtime.close()

    assert "starting with API_TOKEN=***" in shown.stderr_tail
    assert TOKEN not in json.dumps(shown.model_dump(mode="json"))


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


async def test_a_person_sees_every_value_they_approve_and_no_secret(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "tools").mkdir()
    (config_dir / "tools" / "summarize.py").write_text("def run(arguments):\n    return 'ok'\n")
    (config_dir / "tools.json").write_text(json.dumps({"tools": [SUMMARIZE]}))
    arguments = {"text": "a long text", "maxTokens": 7, "api_token": KEY}

    held = await diana_here_async(
        config_dir, data_dir, "call", "summarize", "--args", json.dumps(arguments)
    )
    proposal_id = held.stdout.split()[-1]
    shown = await diana_here_async(config_dir, data_dir, "show", proposal_id)
    listed = await diana_here_async(config_dir, data_dir, "proposals", "--json")
    async with await Runtime.open(
        Profile.APP.but(servers="none", chat=False, share=False, watch=False), config_dir, data_dir
    ) as runtime:
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


# Obtained secrets: every OAuth token is masked from the moment it is obtained or read.


def expire(token_path: Path) -> None:
    """Make the kept access token due for a refresh (as if its hour had passed)."""
    kept = json.loads(token_path.read_text())
    kept["expires_at"] = 0
    token_path.write_text(json.dumps(kept))


def kept_tokens(token_path: Path) -> list[str]:
    tokens = json.loads(token_path.read_text())["tokens"]
    return [tokens["access_token"], tokens["refresh_token"]]


def stored_beside(data_dir: Path, token_path: Path) -> bytes:
    """Every byte under the data dir but the token file itself."""
    return b"".join(
        p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file() and p != token_path
    )


@pytest.mark.processes
def test_oauth_tokens_are_never_shown_or_stored_outside_their_file(
    guarded: Guarded,
    config_dir: Path,
    data_dir: Path,
) -> None:
    configure_guarded(config_dir, {"url": guarded.url})
    token_path = data_dir / "oauth" / "guarded.json"
    login = diana_anew(config_dir, data_dir, "login", "guarded")
    assert login.returncode == 0, login.stderr
    obtained = kept_tokens(token_path)

    read = diana_anew(config_dir, data_dir, "call", "guarded_whoami")  # tokens read from the file
    refused = diana_anew(config_dir, data_dir, "call", "guarded_whoami", "--args", '{"fail": true}')
    expire(token_path)
    refreshed = diana_anew(config_dir, data_dir, "call", "guarded_whoami")  # new ones obtained
    obtained += kept_tokens(token_path)
    logged = diana_anew(config_dir, data_dir, "log", "--json")
    servers = diana_anew(config_dir, data_dir, "servers", "--json")

    assert read.stdout.strip() == "signed in with Bearer ***"
    assert refused.returncode == 1
    assert "refused to answer a caller with Bearer ***" in refused.stderr
    assert refreshed.stdout.strip() == "signed in with Bearer ***"
    grants = [r["grant"] for r in guarded.requests() if r["path"] == "/token"]
    assert grants == ["authorization_code", "refresh_token"]
    printed = "".join(p.stdout + p.stderr for p in (login, read, refused, refreshed, logged))
    printed += servers.stdout + servers.stderr
    stored = stored_beside(data_dir, token_path)
    assert len(set(obtained)) == 4
    for token in obtained:
        assert token not in printed
        assert token.encode() not in stored


@pytest.mark.processes
async def test_oauth_tokens_never_reach_a_trace_or_what_the_screen_shows(
    guarded: Guarded,
    config_dir: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_guarded(config_dir, {"url": guarded.url})
    # Its own process: this one then knows the tokens only from the runtime's start.
    assert run_oauth(config_dir, data_dir, "login", "guarded").returncode == 0
    access, _refresh = kept_tokens(data_dir / "oauth" / "guarded.json")
    exporter = InMemorySpanExporter()
    active = Tracing.with_exporter(exporter, "diana-test")
    tracing.install(active)
    try:
        async with await Runtime.open(
            Profile.APP.but(servers="none", chat=False, share=False, watch=False),
            config_dir,
            data_dir,
        ):
            assert SECRET_VALUES.mask(f"Bearer {access}") == "Bearer ***"  # read at start
        async with await Runtime.open(
            Profile.APP.but(chat=False, share=False, watch=False), config_dir, data_dir
        ) as runtime:
            events = runtime.bus.subscribe()
            await runtime.mcp.wait_ready()
            answered = await runtime.orchestrator.execute("guarded_whoami", {})
            refused = await runtime.orchestrator.execute("guarded_whoami", {"fail": True})
            shown = [
                *[repr(c) for c in await runtime.recent_calls()],
                json.dumps(runtime.mcp.diagnostics("guarded").model_dump(mode="json")),
            ]
            while not events.queue.empty():
                shown.append(repr(events.queue.get_nowait()))
    finally:
        tracing.uninstall(active)
        active.provider.shutdown()

    assert answered.success and refused.error_code is not None
    spans = exporter.get_finished_spans()
    assert len(spans) == 2 and spans[1].status.description is not None
    assert "refused to answer a caller with Bearer ***" in spans[1].status.description
    traced = [json.dumps(dict(s.attributes or {})) + str(s.status.description) for s in spans]
    assert access not in "".join(traced + shown)
    assert any("signed in with Bearer ***" in text for text in shown)


@pytest.mark.processes
def test_a_configured_client_secret_is_read_from_the_config_never_kept(
    guarded: Guarded,
    config_dir: Path,
    data_dir: Path,
) -> None:
    token_path = data_dir / "oauth" / "guarded.json"
    token_path.parent.mkdir(parents=True)
    # What an older diana kept: a copy of the configured client, secret and all.
    copied = {"client_id": "pre-registered", "client_secret": "copied-secret-0"}
    token_path.write_text(json.dumps({"url": guarded.url, "client": copied}))
    auth = {"client_id": "pre-registered", "client_secret": "first-secret-1"}
    configure_guarded(config_dir, {"url": guarded.url, "auth": auth})

    login = diana_anew(config_dir, data_dir, "login", "guarded")
    after_login = token_path.read_text()
    configure_guarded(
        config_dir, {"url": guarded.url, "auth": {**auth, "client_secret": "second-2"}}
    )
    expire(token_path)
    called = diana_anew(config_dir, data_dir, "call", "guarded_whoami")

    assert login.returncode == 0, login.stderr
    assert called.returncode == 0, called.stderr
    assert set(json.loads(after_login)) == {"url", "tokens", "expires_at"}
    assert set(json.loads(token_path.read_text())) == {"url", "tokens", "expires_at"}
    asked = [(r["grant"], r["secret"]) for r in guarded.requests() if r["path"] == "/token"]
    assert asked == [
        ("authorization_code", digest("first-secret-1")),
        ("refresh_token", digest("second-2")),
    ]
    assert not any(r["path"] == "/register" for r in guarded.requests())


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


@pytest.mark.processes
def test_a_machine_client_secret_is_never_kept_with_its_tokens(
    guarded: Guarded,
    config_dir: Path,
    data_dir: Path,
) -> None:
    auth = {
        "grant": "client_credentials",
        "client_id": "machine",
        "client_secret": "machine-secret",
    }
    configure_guarded(config_dir, {"url": guarded.url, "auth": auth})

    called = diana_anew(config_dir, data_dir, "call", "guarded_whoami")

    assert called.returncode == 0, called.stderr
    kept = (data_dir / "oauth" / "guarded.json").read_text()
    assert set(json.loads(kept)) == {"url", "tokens", "expires_at"}
    assert "machine-secret" not in kept


def test_every_kept_token_and_registered_client_secret_is_masked_once_a_runtime_opens(
    tmp_path: Path,
) -> None:
    kept = {
        "url": "https://example.org/mcp",
        "client": {"client_id": "dyn-1", "client_secret": "cs-registered-1"},
        "tokens": {"access_token": "at-kept-1", "refresh_token": "rt-kept-1", "id_token": "it-1x"},
    }
    (tmp_path / "oauth").mkdir()
    (tmp_path / "oauth" / "elsewhere.json").write_text(json.dumps(kept))

    remember_kept_tokens(tmp_path)

    said = "cs-registered-1 at-kept-1 rt-kept-1 it-1x dyn-1"
    assert SECRET_VALUES.mask(said) == "*** *** *** *** dyn-1"


async def test_what_a_front_end_is_told_never_carries_a_secret_value() -> None:
    SECRET_VALUES.remember(["at-0123456789abcdef"])
    bus = EventBus()
    told = bus.subscribe()

    bus.publish(CallProgress(1, "cid", "guarded_whoami", 1, 2, "using at-0123456789abcdef"))
    bus.publish(ServerStatusChanged("guarded", "error", "refused at-0123456789abcdef", 0))

    progress, status = await told.get(), await told.get()
    assert isinstance(progress, CallProgress) and progress.message == "using ***"
    assert isinstance(status, ServerStatusChanged) and status.message == "refused ***"
