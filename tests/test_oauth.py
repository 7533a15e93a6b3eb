"""OAuth 2.1 for HTTP servers, against a real authorization server (tests/fixtures/
oauth_server.py): a server that asks for sign-in waits for a person (`diana login`, or i in
the MCP Servers pane) rather than retrying; the browser named by $BROWSER is opened; tokens are
kept 0600 under the data dir, refreshed before they expire, never logged; `diana logout`
forgets them; machine servers sign in with client credentials."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from diana.tui.panes.servers import ServerRow, ServersPane
from textual.widgets import Static

from .browsers import BROWSER
from .commands import diana_here, diana_here_async
from .network import free_port
from .oauth_guard import Guarded, configure
from .scenarios import app_of, build_app, servers_pane, until
from .waits import listening


def run(
    config_dir: Path, data_dir: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`diana ARGS` in this process, with the headless browser as $BROWSER."""
    return diana_here(config_dir, data_dir, *args, env={"BROWSER": BROWSER, **env})


@pytest.mark.processes
def test_sign_in_waits_for_a_person_then_the_tokens_are_kept_private_and_refreshed(
    guarded: Guarded, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, {"url": guarded.url})
    before = run(config_dir, data_dir, "call", "guarded_whoami")
    assert before.returncode != 0
    assert "sign-in needed" in before.stderr and "diana login guarded" in before.stderr
    assert not any(r["path"] == "/authorize" for r in guarded.requests())  # no browser

    login = run(config_dir, data_dir, "login", "guarded")
    assert login.returncode == 0, login.stderr
    assert "guarded: signed in, 2 tools" in login.stdout
    assert "/authorize?" in login.stderr  # the URL, for when no browser opens
    tokens = data_dir / "oauth" / "guarded.json"
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    assert stat.S_IMODE(tokens.parent.stat().st_mode) == 0o700
    access = json.loads(tokens.read_text())["tokens"]["access_token"]

    after = run(config_dir, data_dir, "call", "guarded_whoami")
    assert after.returncode == 0, after.stderr
    assert "signed in" in after.stdout
    authorizations = [r for r in guarded.requests() if r["path"] == "/authorize"]
    assert [r["challenge_method"] for r in authorizations] == ["S256"]  # PKCE, once
    logged = "".join(p.read_text() for p in (data_dir / "logs").glob("*.jsonl"))
    assert access not in logged


@pytest.mark.processes
@pytest.mark.parametrize("guarded", [["--expires-in", "1"]], indirect=True)
def test_an_expired_token_is_refreshed_without_a_person(
    guarded: Guarded, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, {"url": guarded.url})
    assert run(config_dir, data_dir, "login", "guarded").returncode == 0
    time.sleep(1.5)  # fixed wait: the fake's token lives 1 s of real time
    again = run(config_dir, data_dir, "call", "guarded_whoami")
    assert again.returncode == 0, again.stderr
    grants = [r.get("grant") for r in guarded.requests() if r["path"] == "/token"]
    assert grants == ["authorization_code", "refresh_token"]
    assert len([r for r in guarded.requests() if r["path"] == "/authorize"]) == 1


@pytest.mark.processes
def test_logout_forgets_the_tokens(guarded: Guarded, config_dir: Path, data_dir: Path) -> None:
    configure(config_dir, {"url": guarded.url})
    assert run(config_dir, data_dir, "login", "guarded").returncode == 0
    out = run(config_dir, data_dir, "logout", "guarded")
    assert out.returncode == 0 and "guarded: signed out" in out.stdout
    assert not (data_dir / "oauth" / "guarded.json").exists()
    after = run(config_dir, data_dir, "call", "guarded_whoami")
    assert after.returncode != 0 and "sign-in needed" in after.stderr
    again = run(config_dir, data_dir, "logout", "guarded")
    assert "guarded: was not signed in" in again.stdout


@pytest.mark.processes
def test_a_machine_signs_in_with_client_credentials_and_a_wrong_secret_is_named(
    guarded: Guarded, config_dir: Path, data_dir: Path
) -> None:
    auth = {"grant": "client_credentials", "client_id": "machine", "client_secret": "${SECRET}"}
    configure(config_dir, {"url": guarded.url, "auth": auth})
    ok = run(config_dir, data_dir, "call", "guarded_whoami", SECRET="machine-secret")
    assert ok.returncode == 0, ok.stderr
    assert not any(r["path"] == "/authorize" for r in guarded.requests())

    (data_dir / "oauth" / "guarded.json").unlink()
    wrong = run(config_dir, data_dir, "call", "guarded_whoami", SECRET="not-the-secret")
    assert wrong.returncode != 0
    assert "sign-in failed" in wrong.stderr
    assert "not-the-secret" not in wrong.stderr


@pytest.mark.processes
@pytest.mark.parametrize("guarded", [["--garbage"]], indirect=True)
def test_an_authorization_server_that_answers_garbage_is_named_and_nothing_hangs(
    guarded: Guarded, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, {"url": guarded.url})
    started = time.monotonic()
    login = run(config_dir, data_dir, "login", "guarded")
    assert login.returncode != 0
    assert "guarded:" in login.stderr and "Traceback" not in login.stderr
    assert time.monotonic() - started < 60


def test_an_auth_block_is_checked_naming_the_field(config_dir: Path, data_dir: Path) -> None:
    configure(
        config_dir, {"url": "http://127.0.0.1:9/mcp", "auth": {"grant": "client_credentials"}}
    )
    out = run(config_dir, data_dir, "servers")
    assert out.returncode == 2
    assert "mcp-servers.json" in out.stderr and "client_credentials needs a client_id" in out.stderr
    configure(config_dir, {"command": "x", "auth": {}})
    out = run(config_dir, data_dir, "servers")
    assert '"auth" is for HTTP servers' in out.stderr


@pytest.mark.processes
async def test_the_app_shows_sign_in_needed_and_i_signs_in(
    guarded: Guarded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROWSER", BROWSER)
    app = build_app(tmp_path, {"guarded": {"url": guarded.url}})
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        row = app.query_one(ServerRow)
        badge = row.query_one(".server-badge", Static)
        await until(lambda: "signed out" in str(badge.render()), within=20)
        assert "diana login guarded" in str(row.query_one(".server-error", Static).render())
        pane = app.query_one(ServersPane)
        assert pane.check_action("sign_in", ()) is True  # i is offered, in the footer
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        # Not retried: only a person can help. It waits for one, with no retry timed.
        state = runtime.mcp.connections["guarded"].state
        assert state.sign_in_needed and state.next_retry_at is None
        await pilot.press("i")
        await until(lambda: "ready" in str(badge.render()), within=30)
        assert pane.check_action("sign_in", ()) is False


@pytest.mark.processes
def test_a_server_asking_for_more_scope_mid_call_says_so_and_login_grants_it(
    guarded: Guarded, config_dir: Path, data_dir: Path
) -> None:
    """A 403 insufficient_scope on a call is "needs more access", with how to grant it
    (never "went down"); `diana login` then authorises for that scope too, and the call
    runs."""
    configure(config_dir, {"url": guarded.url})
    assert run(config_dir, data_dir, "login", "guarded").returncode == 0
    refused = run(config_dir, data_dir, "call", "guarded_admin")
    assert refused.returncode != 0
    assert refused.stderr == (
        "diana: MCP server guarded needs more access (scope admin) than it was granted: "
        "press i on it in MCP Servers, or run `diana login guarded`\n"
    )
    assert len([r for r in guarded.requests() if r["path"] == "/authorize"]) == 1  # no browser
    assert run(config_dir, data_dir, "call", "guarded_whoami").returncode == 0  # grant kept

    assert run(config_dir, data_dir, "login", "guarded").returncode == 0
    granted = run(config_dir, data_dir, "call", "guarded_admin")
    assert granted.returncode == 0, granted.stderr
    assert "done as admin" in granted.stdout
    kept = json.loads((data_dir / "oauth" / "guarded.json").read_text())
    assert "admin" in kept["tokens"]["scope"].split() and "wanted_scope" not in kept


@pytest.mark.processes
async def test_in_the_app_a_server_wanting_more_scope_is_granted_it_with_i(
    guarded: Guarded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROWSER", BROWSER)
    app = build_app(tmp_path, {"guarded": {"url": guarded.url}})
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"guarded": "allow"}}))
    assert (await diana_here_async(config_dir, data_dir, "login", "guarded")).returncode == 0
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        connection = runtime.mcp.connections["guarded"]
        await until(lambda: connection.state.status.value == "ready", within=20)
        refused = await runtime.orchestrator.execute("guarded_admin", {})
        assert refused.error is not None
        assert "needs more access (scope admin)" in refused.error
        row = app.query_one(ServerRow)
        error = row.query_one(".server-error", Static)
        await until(lambda: "needs more access" in str(error.render()))
        assert app.query_one(ServersPane).check_action("sign_in", ()) is True
        await pilot.press("i")
        await until(
            lambda: (
                connection.state.more_scope is None and connection.state.status.value == "ready"
            ),
            within=30,
        )
        granted = await runtime.orchestrator.execute("guarded_admin", {})
        assert granted.success, granted.error


@pytest.mark.processes
def test_login_to_a_server_that_asks_for_no_sign_in_says_so(tmp_path: Path) -> None:
    """`diana login` on an HTTP server without OAuth connects and says it asks for no
    sign-in — never that one finished in a browser."""
    from .scenarios import FIXTURE, prepare_dirs

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, FIXTURE, "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, server)
        url = {"url": f"http://127.0.0.1:{port}/mcp", "transport": "streamable-http"}
        config_dir, data_dir = prepare_dirs(tmp_path, {"open": url})
        done = diana_here(config_dir, data_dir, "login", "open")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("open: asks for no sign-in; connected without one, ")
        assert "browser" not in done.stdout and "signed in," not in done.stdout
        assert not (data_dir / "oauth" / "open.json").exists()
        out = diana_here(config_dir, data_dir, "logout", "open")
        assert out.stdout == "open: was not signed in\n"
    finally:
        server.terminate()
        server.wait(timeout=10)
