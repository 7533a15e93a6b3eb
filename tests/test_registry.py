"""Finding servers in the MCP Registry: the client and its cache against a fake registry on
127.0.0.1, the entries it builds, `diana servers search|install|remove|test` end to end with
real servers, and the model's tools."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from diana.core.chat.gaps import ToolGapReport
from diana.core.config.settings import ConfigError, Paths, RegistrySettings, load_settings
from diana.core.mcp.registry import RegistryClient, RegistryError, candidates
from diana.core.mcp.registry_entry import MAX_TEXT, plan_install, read_entry
from diana.core.mcp.venv_install import RegistryEntryError
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.core.web.addresses import AddressRule
from diana.tui.modals.registry import RegistryInstallScreen, RegistrySearchScreen
from diana.tui.panes.transcript import ApprovalPrompt, GapReportView
from textual.widgets import Input, OptionList, Static

from .commands import diana, diana_argv, diana_here
from .configs import FIXTURE
from .conftest import START, stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .fixtures.fake_registry import TIME_VERSION, FakeRegistry, registry_entries
from .network import free_port
from .scenarios import TERMINAL_SIZE, ask, build_app, settle, type_command
from .scenarios import until as until_shown
from .screen import transcript
from .terminal import Terminal
from .waits import listening, started, until

TIME = "io.github.modelcontextprotocol/time"


class HandClock:
    """Wall time moves only when the test says so."""

    def __init__(self) -> None:
        self.at = START

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0


@pytest.fixture
def registry() -> Any:
    with FakeRegistry() as fake:
        yield fake


def client(url: str, cache: Path, clock: Any, ttl: float = 60.0) -> RegistryClient:
    return RegistryClient(RegistrySettings(url=url, cache_ttl=ttl), cache, clock)


def use_registry(config_dir: Path, url: str) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    (config_dir / "settings.json").write_text(json.dumps({**settings, "registry": {"url": url}}))


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"url": "ftp://registry.example"}, "registry.url: "),
        ({"url": "http://"}, "registry.url: "),
        ({"cache_ttl": -1}, "registry.cache_ttl: "),
        ({"urls": "x"}, "registry.urls: "),
    ],
)
def test_a_bad_registry_setting_names_the_file_and_field(
    config_dir: Path, data_dir: Path, given: dict[str, Any], said: str
) -> None:
    (config_dir / "settings.json").write_text(json.dumps({"registry": given}))
    with pytest.raises(ConfigError) as caught:
        load_settings(Paths(config_dir, data_dir))
    assert str(caught.value).startswith(f"{config_dir / 'settings.json'}: {said}")
    (config_dir / "settings.json").write_text(
        json.dumps({"registry": {"url": "http://127.0.0.1:9/"}})
    )
    assert load_settings(Paths(config_dir, data_dir)).registry.url == "http://127.0.0.1:9"


# -- the client and its cache -------------------------------------------------------------------


async def test_search_is_cached_for_its_ttl_and_offline_answers_from_the_cache(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    clock = HandClock()
    asked = client(registry.url, tmp_path / "cache", clock, ttl=60)
    first = await asked.search("time")
    names = [s.name for s in first.servers]
    assert names[0] == TIME and "io.example/time-keyed" in names
    assert names[-1] == "io.example/old-time"  # deprecated: listed last, and said so
    assert first.servers[-1].status == "deprecated" and not first.from_cache
    assert registry.requests[0].startswith("/v0.1/servers?search=time&limit=10")

    again = await asked.search("time")
    assert again.from_cache and again.offline is None and len(registry.requests) == 1
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700

    clock.at += timedelta(seconds=61)  # past its TTL: asked anew
    await asked.search("time")
    assert len(registry.requests) == 2

    registry.stop()
    clock.at += timedelta(hours=5)
    offline = await asked.search("time")
    assert offline.from_cache and [s.name for s in offline.servers] == names
    assert offline.offline is not None and "is not reachable" in offline.offline
    assert "answered from the cache" in offline.offline
    with pytest.raises(RegistryError, match="nothing is cached for it"):
        await asked.search("calendar")


async def test_an_older_registry_is_asked_on_v0(tmp_path: Path) -> None:
    with FakeRegistry(api="v0") as old:
        found = await client(old.url, tmp_path, HandClock()).server(TIME)
        assert found.version == TIME_VERSION
        assert any(r.startswith("/v0/servers/") for r in old.requests)
        with pytest.raises(RegistryEntryError, match=r"has no server io\.example/none"):
            await client(old.url, tmp_path, HandClock()).server("io.example/none")
    with FakeRegistry(api="v9") as other:  # something else listens there
        with pytest.raises(RegistryError, match="does not answer as an MCP Registry"):
            await client(other.url, tmp_path, HandClock()).search("time")


async def test_what_a_registry_sends_is_bounded(tmp_path: Path) -> None:
    long = {"server": {"name": "io.example/long", "description": "x" * 50_000, "version": "1"}}
    many = [
        {"server": {"name": f"io.example/n{i}", "description": "d", "version": "1"}}
        for i in range(300)
    ]
    junk: list[Any] = ["not an entry", {"server": {"description": "no name"}}]
    with FakeRegistry([long, *many, *junk]) as fake:
        answer = await client(fake.url, tmp_path, HandClock()).search("", limit=100)
    assert len(answer.servers) == 100 and answer.next_cursor == "100"
    entry = read_entry(long)
    assert entry is not None and entry.server.description.startswith("x" * MAX_TEXT)
    assert entry.server.description.endswith("… [cut at 1000 bytes of 48.8 KiB]")
    assert read_entry(junk[1]) is None and read_entry(junk[0]) is None


async def test_candidates_for_a_missing_capability_are_ranked_by_its_words(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    found = await candidates(client(registry.url, tmp_path, HandClock()), "calendar_api")
    assert [s.name for s in found] == ["io.example/calendar"]
    timely = await candidates(client(registry.url, tmp_path, HandClock()), "time_zone_data")
    assert len(timely) == 3 and timely[0].name == TIME
    assert "io.example/old-time" not in [s.name for s in timely]  # deprecated: never offered


# -- from an entry to mcp-servers.json ------------------------------------------------------


def entry_of(name: str) -> Any:
    for item in registry_entries("http://127.0.0.1:9/mcp"):
        if item["server"]["name"] == name:
            found = read_entry(item)
            assert found is not None
            return found
    raise KeyError(name)


def which_only(*programs: str) -> Any:
    return lambda program: f"/usr/bin/{program}" if program in programs else None


def test_each_kind_of_package_runs_pinned_to_its_version() -> None:
    everything = plan_install(
        entry_of("io.github.modelcontextprotocol/server-everything"), which=which_only("npx")
    )
    assert everything.entry({}) == {
        "command": "/usr/bin/npx",  # diana's own, whatever PATH the server is given
        "args": ["-y", "--", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"],
    }
    files = plan_install(
        entry_of("io.github.modelcontextprotocol/server-filesystem"), which=which_only("npx")
    )
    assert [s.name for s in files.missing({})] == ["allowed_directory"]
    assert files.entry({"allowed_directory": "/srv"})["args"][-1] == "/srv"

    keyed = entry_of("io.example/time-keyed")
    uvx = plan_install(keyed, which=which_only("uvx"))
    assert uvx.how == f"pypi via uvx mcp-server-time=={TIME_VERSION}"
    assert uvx.entry({"TIME_API_KEY": "k"}) == {
        "command": "/usr/bin/uvx",
        "args": [f"mcp-server-time=={TIME_VERSION}"],
        "env": {"TIME_API_KEY": "k", "TIME_REGION": "eu"},
        "secrets": ["TIME_API_KEY"],
    }
    (secret,) = uvx.missing({})
    assert secret.secret and secret.public() == {
        "name": "TIME_API_KEY",
        "kind": "env",
        "secret": True,
        "description": "Your API key.",
    }
    with pytest.raises(RegistryEntryError, match="needs TIME_API_KEY"):
        uvx.entry({})
    pipx = plan_install(keyed, which=which_only("pipx"), installed=lambda *_: None)
    assert pipx.entry({"TIME_API_KEY": "k"})["args"] == [
        "run",
        "--spec",
        f"mcp-server-time=={TIME_VERSION}",
        "mcp-server-time",
    ]
    with pytest.raises(RegistryEntryError, match="needs uvx or pipx"):
        plan_install(keyed, which=which_only(), installed=lambda *_: None)

    image = read_entry(
        {
            "server": {
                "name": "io.example/box",
                "description": "d",
                "version": "2.0.0",
                "packages": [
                    {
                        "registryType": "oci",
                        "identifier": "docker.io/example/box",
                        "version": "2.0.0",
                        "transport": {"type": "stdio"},
                        "environmentVariables": [{"name": "TOKEN", "isRequired": True}],
                    }
                ],
            }
        }
    )
    assert image is not None
    boxed = plan_install(image, which=which_only("podman")).entry({"TOKEN": "${TOKEN}"})
    assert boxed == {
        "command": "/usr/bin/podman",
        "args": ["run", "-i", "--rm", "-e", "TOKEN", "docker.io/example/box:2.0.0"],
        "env": {"TOKEN": "${TOKEN}"},
    }
    with pytest.raises(RegistryEntryError, match="no remote at a loopback address"):
        plan_install(entry_of("io.example/remote-echo"), which=which_only())
    allowed = AddressRule.of(False, ["127.0.0.1:9"])  # the person's own settings say so
    remote = plan_install(entry_of("io.example/remote-echo"), which=which_only(), rule=allowed)
    assert remote.entry({}) == {"url": "http://127.0.0.1:9/mcp", "transport": "streamable-http"}
    with pytest.raises(RegistryEntryError, match=r"npm package .* needs npx"):
        plan_install(
            entry_of("io.github.modelcontextprotocol/server-everything"), which=which_only()
        )


# -- diana servers search | install | test | remove --------------------------------------------


@pytest.mark.processes
def test_search_install_call_and_a_failure_that_writes_nothing(
    registry: FakeRegistry, config_dir: Path, data_dir: Path
) -> None:
    use_registry(config_dir, registry.url)
    servers_file = config_dir / "mcp-servers.json"
    found = diana_here(config_dir, data_dir, "servers", "search", "time", "--json")
    assert found.returncode == 0, found.stderr
    listed = {s["name"]: s for s in json.loads(found.stdout)}
    assert f"mcp-server-time=={TIME_VERSION}" in listed[TIME]["runs"]
    assert listed["io.example/time-keyed"]["required_settings"][0]["name"] == "TIME_API_KEY"
    assert listed["io.example/old-time"]["status"] == "deprecated"

    broken = diana_here(config_dir, data_dir, "servers", "install", "io.example/broken-time")
    assert broken.returncode == 1
    assert "process exited with code 1" in broken.stderr
    assert "Error: invalid --local-timezone 'Not/AZone'" in broken.stderr
    assert "mcp-servers.json was not changed" in broken.stderr
    assert servers_file.read_text() == "[]"

    old = diana_here(config_dir, data_dir, "servers", "install", "io.example/old-time")
    assert old.returncode == 2 and "is deprecated in the registry" in old.stderr

    installed = diana_here(config_dir, data_dir, "servers", "install", TIME, "--as", "clock")
    assert installed.returncode == 0, installed.stderr
    assert "added clock: 2 tools (get_current_time, convert_time)" in installed.stdout
    (written,) = json.loads(servers_file.read_text())
    assert written["name"] == "clock" and written["command"].endswith("mcp-server-time")

    called = diana_here(
        config_dir, data_dir, "call", "clock_get_current_time", "--args", '{"timezone": "UTC"}'
    )
    assert called.returncode == 0, called.stderr
    assert '"timezone": "UTC"' in called.stdout

    tested = diana_here(config_dir, data_dir, "servers", "test", "clock")
    assert tested.returncode == 0 and "clock works: 2 tools" in tested.stdout
    removed = diana_here(config_dir, data_dir, "servers", "remove", "clock")
    assert removed.returncode == 0 and json.loads(servers_file.read_text()) == []
    again = diana_here(config_dir, data_dir, "servers", "remove", "clock")
    assert again.returncode == 1 and 'has no server named "clock"' in again.stderr


@pytest.mark.processes
def test_a_required_secret_is_asked_without_echo_and_never_printed(
    registry: FakeRegistry, config_dir: Path, data_dir: Path
) -> None:
    use_registry(config_dir, registry.url)
    secret = "s3cret-value-42"
    piped = diana_here(config_dir, data_dir, "servers", "install", "io.example/time-keyed")
    assert piped.returncode == 2
    assert "needs TIME_API_KEY: give --env NAME=VALUE" in piped.stderr

    env = {k: v for k, v in os.environ.items() if k != "TIME_API_KEY"}
    terminal = Terminal(
        diana_argv(config_dir, data_dir, "servers", "install", "io.example/time-keyed"), env
    )
    try:
        terminal.wait_for("? TIME_API_KEY (environment variable, secret: not shown)")
        until(lambda: not terminal.echoes())  # typing a secret: not shown
        terminal.type(secret)
        out, _ = terminal.process.communicate(timeout=60)
        assert terminal.process.returncode == 0, terminal.shown
        assert "added time-keyed: 2 tools" in out
        assert secret not in terminal.shown and secret not in out
        assert terminal.echoes()  # typing is shown again
    finally:
        terminal.close()
    (written,) = json.loads((config_dir / "mcp-servers.json").read_text())
    assert written["env"] == {"TIME_API_KEY": secret, "TIME_REGION": "eu"}
    assert (config_dir / "mcp-servers.json").stat().st_mode & 0o777 == 0o600  # yours alone
    listed = diana_here(config_dir, data_dir, "servers", "--json")
    assert secret not in listed.stdout + listed.stderr

    # With the variable in the environment, Enter writes a reference to it instead.
    terminal = Terminal(
        diana_argv(
            config_dir, data_dir, "servers", "install", "io.example/time-keyed", "--as", "ref"
        ),
        {**env, "TIME_API_KEY": secret},
    )
    try:
        terminal.wait_for("Enter: write ${TIME_API_KEY}")
        terminal.wait_for("> ")
        terminal.type("")
        terminal.process.communicate(timeout=60)
        assert terminal.process.returncode == 0, terminal.shown
    finally:
        terminal.close()
    by_name = {e["name"]: e for e in json.loads((config_dir / "mcp-servers.json").read_text())}
    assert by_name["ref"]["env"]["TIME_API_KEY"] == "${TIME_API_KEY}"


@pytest.mark.processes
@pytest.mark.skipif(shutil.which("npx") is None, reason="needs npx (Node.js)")
def test_an_npm_server_is_installed_with_npx_pinned_to_its_version(
    registry: FakeRegistry, config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    use_registry(config_dir, registry.url)
    name = "io.github.modelcontextprotocol/server-filesystem"
    installed = diana_here(
        config_dir, data_dir, "servers", "install", name, "--env", f"allowed_directory={tmp_path}"
    )
    assert installed.returncode == 0, installed.stderr
    (written,) = json.loads((config_dir / "mcp-servers.json").read_text())
    assert written["command"] == shutil.which("npx")
    assert written["args"] == [
        "-y",
        "--",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        str(tmp_path),
    ]
    assert "read_file" in installed.stdout or "read_text_file" in installed.stdout


def build_wheel(project: Path, into: Path) -> Path:
    """The wheel of a one-module project with no dependencies, as its pyproject.toml declares
    it (name, version, console scripts): the standard zip layout pip installs from, written
    here rather than by a build backend (pip wheel costs about a second of CPU)."""
    declared = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    name, version = declared["name"], declared["version"]
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    scripts = "".join(f"{k} = {v}\n" for k, v in declared.get("scripts", {}).items())
    files = {
        f"{module}.py": (project / f"{module}.py").read_bytes(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Requires-Python: {declared['requires-python']}\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: diana-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": f"[console_scripts]\n{scripts}".encode(),
    }
    record = "".join(
        f"{path},sha256="
        f"{base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n"
        for path, data in files.items()
    )
    files[f"{info}/RECORD"] = f"{record}{info}/RECORD,,\n".encode()
    into.mkdir(parents=True, exist_ok=True)
    wheel = into / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


# -- the model's tools ------------------------------------------------------------------------


@pytest.mark.processes
async def test_the_model_searches_and_asks_for_a_registry_server(
    registry: FakeRegistry, config_dir: Path, data_dir: Path
) -> None:
    use_registry(config_dir, registry.url)
    path = config_dir / "mcp-servers.json"
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        execute = runtime.orchestrator.execute
        searched = await execute("mcp_search_servers", {"query": "time", "limit": 3})
        assert searched.success, searched.error  # reversible: runs without a person
        assert searched.data["servers"][0]["name"] == TIME
        assert searched.data["registry"] == registry.url

        # What cannot be planned is refused before a person is asked.
        keyed = await execute(
            "mcp_request_server_addition", {"registry_name": "io.example/time-keyed"}
        )
        assert keyed.error_code is ErrorCode.INVALID_ARGUMENTS
        assert "needs TIME_API_KEY" in (keyed.error or "")
        assert await runtime.approvals.select() == []
        assert runtime.subagent.recent() == [] and path.read_text() == "[]"

        held = await execute("mcp_request_server_addition", {"registry_name": TIME})
        assert held.error_code is ErrorCode.PENDING_APPROVAL  # a person decides
        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.result is not None and decision.result.success, decision.result
        assert decision.result.data["server"] == "time"
        request = await runtime.subagent.wait(decision.result.data["request_id"])
        assert request.state.value == "completed", request.message
        (written,) = json.loads(path.read_text())
        assert written["name"] == "time" and written["command"].endswith("mcp-server-time")


@pytest.mark.processes
def test_list_available_tools_answers_from_the_tool_cache_in_a_command(
    config_dir: Path, data_dir: Path
) -> None:
    time_server = str(Path(sys.executable).parent / "mcp-server-time")
    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"time": {"command": time_server}}})
    )
    assert diana_here(config_dir, data_dir, "tools", "--refresh").returncode == 0
    listed = diana_here(config_dir, data_dir, "call", "mcp_list_available_tools", "--json")
    assert listed.returncode == 0, listed.stderr
    (server,) = json.loads(listed.stdout)["data"]["servers"]
    assert server["server"] == "time" and server["listed"].startswith("from the tool cache")
    names = [t["name"] for t in server["tools"]]
    assert names == ["time_get_current_time", "time_convert_time"]


# -- the tool gap names servers that would fill it --------------------------------------------


def test_a_gap_report_names_registry_servers_that_would_fill_it(
    registry: FakeRegistry, config_dir: Path, data_dir: Path
) -> None:
    use_registry(config_dir, registry.url)
    prompt = "what's on my calendar tomorrow?"
    with FakeOllama() as fake:
        gap = {"capabilities": [{"name": "calendar_api", "tool": None}]}
        fake.add_gap({"content": json.dumps(gap), "after_chat": True})
        fake.add({"content": "You have nothing on."})
        ollama = {"OLLAMA_HOST": fake.url}
        done = diana_here(config_dir, data_dir, "ask", prompt, "--json", env=ollama)
        assert done.returncode == 4, done.stderr
        report = ToolGapReport.model_validate_json(done.stdout)
        assert report.missing_tools == ["calendar_api"]
        (calendar,) = report.candidates["calendar_api"]
        assert calendar["name"] == "io.example/calendar" and calendar["title"] == "Calendar"
        assert calendar["runs"].startswith("pypi")

        # A registry that is not chosen in settings.json is never asked of itself.
        (config_dir / "settings.json").write_text(json.dumps({"registry": {"cache_ttl": 0}}))
        fake.add_gap({"content": json.dumps(gap), "after_chat": True})
        fake.add({"content": "You have nothing on."})
        asked = len(registry.requests)
        quiet = diana_here(config_dir, data_dir, "ask", prompt, "--json", env=ollama)
        assert quiet.returncode == 4, quiet.stderr
        assert ToolGapReport.model_validate_json(quiet.stdout).candidates == {}
        assert len(registry.requests) == asked


@pytest.mark.processes
async def test_the_gap_loop_a_gap_names_a_server_and_one_approval_adds_it(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    """The chat's gap report lists the registry's calendar server; /install asks for an
    approval inline, and once approved its tool is callable in the same app session."""
    gap = {"content": json.dumps({"capabilities": [{"name": "calendar_api", "tool": None}]})}
    with FakeOllama([{"content": "Nothing."}], gap_replies=[{**gap, "after_chat": True}]) as fake:
        app = build_app(tmp_path, ollama=fake.url, settings={"registry": {"url": registry.url}})
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "What's on my calendar tomorrow?")
            view = app.query_one(GapReportView)
            assert [e["name"] for e in view.report.candidates["calendar_api"]] == [
                "io.example/calendar"
            ]
            shown = transcript(app)
            assert "calendar_api io.example/calendar Calendar — Your calendar" in shown
            assert "/install NAME adds one" in shown

            await type_command(pilot, "/install io.example/calendar")
            prompt = app.query_one(ApprovalPrompt)
            arguments = prompt.proposal.arguments
            assert arguments["registry_name"] == "io.example/calendar"
            assert arguments["plan"]["command"].endswith("mcp-server-time")  # what runs
            assert app.core is not None and app.core._runtime.subagent.recent() == []
            await pilot.press("a")
            await until_shown(lambda: prompt.final, within=30)
            (request,) = app.core._runtime.subagent.recent()
            await app.core._runtime.subagent.wait(request.id)
            assert request.state.value == "completed", request.message
            tools = app.core._runtime.orchestrator
            called = "calendar_get_current_time"
            await until_shown(lambda: tools.owner(called) is not None, within=30)
            await type_command(pilot, '/call calendar_get_current_time {"timezone": "UTC"}')
            assert "✓ calendar_get_current_time" in transcript(app)


@pytest.mark.processes
def test_a_remote_server_from_the_registry_is_installed_by_its_url(
    config_dir: Path, data_dir: Path
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, FIXTURE, "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        listening(port, process)
        with FakeRegistry(registry_entries(url)) as registry:
            use_registry(config_dir, registry.url)
            # A remote on this machine is installed only where the person's settings allow.
            settings = json.loads((config_dir / "settings.json").read_text())
            settings["web"] = {"allow_hosts": [f"127.0.0.1:{port}"]}
            (config_dir / "settings.json").write_text(json.dumps(settings))
            found = diana_here(config_dir, data_dir, "servers", "search", "remote")
            assert "io.example/remote-echo" in found.stdout
            assert f"remote streamable-http at {url}" in found.stdout
            installed = diana_here(
                config_dir, data_dir, "servers", "install", "io.example/remote-echo", "--as", "echo"
            )
            assert installed.returncode == 0, installed.stderr
        (written,) = json.loads((config_dir / "mcp-servers.json").read_text())
        assert written == {"name": "echo", "url": url, "transport": "streamable-http"}
        called = diana_here(config_dir, data_dir, "call", "echo_echo", "--args", '{"text": "hi"}')
        assert called.returncode == 0 and "hi" in called.stdout, called.stderr
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.processes
async def test_the_servers_pane_finds_a_server_asks_its_secret_and_adds_it(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    app = build_app(tmp_path, settings={"registry": {"url": registry.url}})
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        runtime = app.core._runtime
        assert runtime is not None
        await pilot.press("f4", "f")
        assert isinstance(app.screen, RegistrySearchScreen)
        await pilot.press(*"keyed", "enter")
        results = app.screen.query_one("#registry-results", OptionList)
        await until_shown(lambda: results.option_count == 1)
        await pilot.press("enter")
        await until_shown(lambda: isinstance(app.screen, RegistryInstallScreen))
        form = app.screen
        assert form.query_one("#registry-install-name", Input).value == "time-keyed"
        secret = form.query_one("#registry-install-setting-0", Input)
        assert secret.password and secret.value == ""
        assert form.query_one("#registry-install-setting-1", Input).value == "eu"
        await pilot.press("ctrl+s")  # the secret is required: the form says so and stays
        error = str(form.query_one("#registry-install-error", Static).render())
        assert error == "io.example/time-keyed needs TIME_API_KEY"
        secret.value = "typed-secret"
        await pilot.press("ctrl+s")
        await until_shown(lambda: not isinstance(app.screen, RegistryInstallScreen))
        assert not isinstance(app.screen, RegistrySearchScreen)
        (request,) = runtime.subagent.recent()
        assert (request.server, request.origin) == ("time-keyed", "tui")
        await runtime.subagent.wait(request.id)
        assert request.state.value == "completed", request.message
        servers = json.loads((app.paths.config_dir / "mcp-servers.json").read_text())
        written = servers["mcpServers"]["time-keyed"]
        assert written["env"] == {"TIME_API_KEY": "typed-secret", "TIME_REGION": "eu"}


@pytest.mark.processes
def test_an_edit_is_tested_before_it_is_written(config_dir: Path, data_dir: Path) -> None:
    path = config_dir / "mcp-servers.json"
    time_server = str(Path(sys.executable).parent / "mcp-server-time")
    path.write_text(json.dumps({"mcpServers": {"t": {"command": time_server, "args": []}}}))
    before = path.read_text()
    bad_zone = 'args=["--local-timezone", "No/Zone"]'
    broken = diana_here(config_dir, data_dir, "servers", "edit", "t", "--set", bad_zone)
    assert broken.returncode == 1
    assert "Error: invalid --local-timezone 'No/Zone'" in broken.stderr
    assert path.read_text() == before
    edited = diana_here(
        config_dir,
        data_dir,
        "servers",
        "edit",
        "t",
        "--set",
        'args=["--local-timezone", "Europe/Paris"]',
        "--set",
        "timeout=20",
        "--set",
        "env.TZ_NOTE=42",
    )
    assert edited.returncode == 0, edited.stderr
    assert "modified t: 2 tools" in edited.stdout
    entry = json.loads(path.read_text())["mcpServers"]["t"]
    assert entry == {
        "command": time_server,
        "args": ["--local-timezone", "Europe/Paris"],
        "timeout": 20,
        "env": {"TZ_NOTE": "42"},
    }
    missing = diana_here(config_dir, data_dir, "servers", "edit", "t", "--unset", "cwd")
    assert missing.returncode == 2 and "--unset cwd: the entry has no such field" in missing.stderr


@pytest.mark.processes
async def test_the_servers_pane_shows_a_request_made_by_diana_elsewhere(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    app = build_app(tmp_path, settings={"registry": {"url": registry.url}})
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        await pilot.press("f4")
        panel = app.query_one("#subagent-requests", Static)
        assert not panel.display
        # A command beside the app: its own process, told of nothing but the database.
        done = await asyncio.to_thread(
            diana,
            app.paths.config_dir,
            app.paths.data_dir,
            "servers",
            "install",
            "io.example/broken-time",
        )
        assert done.returncode == 1
        await until_shown(lambda: "✗ add broken-time" in str(panel.render()), within=10)
        shown = str(panel.render()).splitlines()[1:]  # a failure is wrapped whole
        assert shown[0].startswith("✗ add broken-time")
        assert "failed: the test connection failed" in " ".join(line.strip() for line in shown)


@pytest.mark.processes
def test_a_pypi_server_with_no_runner_gets_a_virtual_environment_of_its_own(
    registry: FakeRegistry, config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    """No uvx, no pipx, not installed beside diana: the package is installed at its pinned
    version into a venv under the data dir (from a local wheel: pip is set up so)."""
    wheels = tmp_path / "wheels"
    build_wheel(Path(__file__).parent / "fixtures" / "pypi_echo", wheels)
    use_registry(config_dir, registry.url)
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    found = diana_here(config_dir, data_dir, "servers", "search", "pypi-echo", "--json")
    (entry,) = json.loads(found.stdout)
    home = data_dir / "servers" / "diana-echo-server-1.0.0"
    assert (
        entry["runs"]
        == f"pypi diana-echo-server==1.0.0 in a virtual environment of its own ({home})"
    )
    installed = diana_here(
        config_dir, data_dir, "servers", "install", "io.example/pypi-echo", env=offline
    )
    assert installed.returncode == 0, installed.stderr
    assert "added pypi-echo: 1 tool (echo)" in installed.stdout
    (written,) = json.loads((config_dir / "mcp-servers.json").read_text())
    assert written["command"] == str(home / "bin" / "diana-echo-server")
    called = diana_here(config_dir, data_dir, "call", "pypi_echo_echo", "--args", '{"text": "hi"}')
    assert called.returncode == 0 and "hi" in called.stdout, called.stderr
    assert "readable by others" not in called.stderr  # the venv is private, and still runs
