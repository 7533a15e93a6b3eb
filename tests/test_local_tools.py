"""Local tools from tools.json, registry changes across processes, and code_execution."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.core.config.settings import ConfigError
from diana.core.events import Notice
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.app import DianaApp, make_app
from diana.tui.modals.tool_form import ToolFormScreen
from textual.pilot import Pilot

from .commands import diana, diana_here
from .conftest import stepping_clock
from .scenarios import TERMINAL_SIZE, settle, until

WORD_COUNT = {
    "name": "word_count",
    "description": "Count the words in a text.",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"words": {"type": "integer"}},
        "required": ["words"],
    },
    "script": "word_count.py",
    "risk": "reversible",
    "parallel_capable": True,
}

SCRIPTS = {
    "word_count.py": (
        "def run(arguments):\n"
        "    print('this goes to stderr, not into the answer')\n"
        "    return {'words': len(arguments['text'].split())}\n"
    ),
    "liar.py": "def run(arguments):\n    return {'words': 'many'}\n",
    "later.py": (
        "import asyncio\nasync def run(arguments):\n    await asyncio.sleep(0)\n    return 7\n"
    ),
    # Starts a child, writes its pid, then never ends.
    "runaway.py": (
        "import pathlib, subprocess, time\n"
        "def run(arguments):\n"
        "    child = subprocess.Popen(['sleep', '300'])\n"
        "    pathlib.Path(arguments['pidfile']).write_text(f'{child.pid}')\n"
        "    while True:\n"
        "        time.sleep(0.1)\n"
    ),
    # Records when it ran, so overlapping calls can be seen.
    "span.py": (
        "import json, pathlib, time\n"
        "def run(arguments):\n"
        "    start = time.monotonic()\n"
        "    time.sleep(0.4)\n"
        "    with open(arguments['log'], 'a') as out:\n"
        "        out.write(json.dumps([start, time.monotonic()]) + '\\n')\n"
        "    return 'done'\n"
    ),
}


def tool(name: str, script: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} for tests",
        "script": script,
        "risk": "reversible",
        **fields,
    }


def write_registry(config_dir: Path, *entries: dict[str, Any]) -> None:
    folder = config_dir / "tools"
    folder.mkdir(exist_ok=True)
    for name, text in SCRIPTS.items():
        (folder / name).write_text(text)
    (config_dir / "tools.json").write_text(json.dumps({"tools": list(entries)}))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has finished: only its exit status is left for its parent to collect.
    status = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path("/proc").exists() else "R"
    return status != "Z"


async def open_runtime(config_dir: Path, data_dir: Path, *, watch: bool = False) -> Runtime:
    return await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=watch),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


@pytest.mark.processes
async def test_a_tool_runs_its_script_in_a_process_and_its_output_is_checked(
    config_dir: Path, data_dir: Path
) -> None:
    write_registry(
        config_dir,
        WORD_COUNT,
        {**WORD_COUNT, "name": "liar", "script": "liar.py"},
        tool("ghost", "ghost.py"),
        tool("later", "later.py"),
    )
    runtime = await open_runtime(config_dir, data_dir)
    try:
        orchestrator = runtime.orchestrator
        counted = await orchestrator.execute("word_count", {"text": "one two three"})
        assert counted.success and counted.data == {"words": 3}
        bad_args = await orchestrator.execute("word_count", {"text": 5})
        assert bad_args.error_code is ErrorCode.INVALID_ARGUMENTS
        assert 'argument "text"' in (bad_args.error or "")
        lied = await orchestrator.execute("liar", {"text": "x"})
        assert lied.error_code is ErrorCode.INVALID_RESPONSE
        assert "output_schema at words: 'many' is not of type 'integer'" in (lied.error or "")
        awaited = await orchestrator.execute("later", {})
        assert awaited.success and awaited.data == 7  # an async run() is awaited
        missing = await orchestrator.execute("ghost", {})
        assert missing.error_code is ErrorCode.TOOL_EXECUTION_FAILED
        assert "ghost.py is missing" in (missing.error or "")
    finally:
        await runtime.close()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (tool("x", "/etc/passwd"), "tools[0] (x).script: must be a path inside the tools/"),
        (tool("x", "../escape.py"), "tools[0] (x).script: must be a path inside the tools/"),
        (tool("x", "x.py", parameters={"type": "array"}), "tools[0] (x).parameters: must be"),
        (tool("Bad-Name", "x.py"), "tools[0] (Bad-Name).name: String should match pattern"),
        (tool("x", "x.py", timeout=-1), "tools[0] (x).timeout: Input should be greater than 0"),
        (tool("x", "x.py", colour="red"), "tools[0] (x).colour: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_registry_stops_start_up_naming_the_field(
    config_dir: Path, data_dir: Path, entry: dict[str, Any], message: str
) -> None:
    write_registry(config_dir, entry)
    with pytest.raises(ConfigError) as caught:
        make_app(config_dir, data_dir)
    assert message in str(caught.value)
    assert str(config_dir / "tools.json") in str(caught.value)
    assert not (data_dir / "diana.db").exists()  # nothing was started or written


def test_duplicate_names_and_the_command_line_refuse_to_start(
    config_dir: Path, data_dir: Path
) -> None:
    write_registry(config_dir, WORD_COUNT, WORD_COUNT)
    done = diana_here(config_dir, data_dir, "tools")
    assert done.returncode == 2
    assert "tools[1] (word_count): the name is used twice" in done.stderr


@pytest.mark.processes
async def test_a_runaway_script_is_killed_at_its_timeout_with_its_children(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_registry(config_dir, tool("runaway", "runaway.py", timeout=1.5))
    runtime = await open_runtime(config_dir, data_dir)
    pidfile = tmp_path / "child.pid"
    try:
        result = await runtime.orchestrator.execute("runaway", {"pidfile": str(pidfile)})
    finally:
        await runtime.close()
    assert result.error_code is ErrorCode.TOOL_EXECUTION_TIMEOUT
    assert "did not finish within 1.5 s" in (result.error or "")
    child = int(pidfile.read_text())
    await until(lambda: not alive(child), within=3)


@pytest.mark.parametrize("link", ["script", "folder"])
async def test_a_script_whose_real_path_leaves_the_tools_folder_is_refused(
    config_dir: Path, data_dir: Path, tmp_path: Path, link: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    effect = tmp_path / "ran"
    (outside / "evil.py").write_text(
        f"def run(arguments):\n    open({str(effect)!r}, 'w').write('ran')\n    return 1\n"
    )
    if link == "script":  # tools/evil.py -> ../outside/evil.py
        write_registry(config_dir, tool("evil", "evil.py"))
        (config_dir / "tools" / "evil.py").symlink_to(outside / "evil.py")
    else:  # tools/lib -> ../outside, the script named as lib/evil.py
        write_registry(config_dir, tool("evil", "lib/evil.py"))
        (config_dir / "tools" / "lib").symlink_to(outside, target_is_directory=True)
    runtime = await open_runtime(config_dir, data_dir)
    try:
        result = await runtime.orchestrator.execute("evil", {})
    finally:
        await runtime.close()
    assert result.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert (result.error or "").startswith(
        "tools[0] (evil).script: must be a path inside the tools/ folder"
    )
    assert str(outside / "evil.py") in (result.error or "")
    assert not effect.exists()


@pytest.mark.processes
async def test_a_link_that_stays_inside_the_tools_folder_runs(
    config_dir: Path, data_dir: Path
) -> None:
    write_registry(config_dir, {**WORD_COUNT, "script": "alias.py"})
    (config_dir / "tools" / "alias.py").symlink_to("word_count.py")
    runtime = await open_runtime(config_dir, data_dir)
    try:
        counted = await runtime.orchestrator.execute("word_count", {"text": "a b c"})
    finally:
        await runtime.close()
    assert counted.data == {"words": 3}


@pytest.mark.processes
@pytest.mark.parametrize("parallel", [False, True])
async def test_serial_tools_run_one_call_at_a_time_and_parallel_ones_do_not(
    config_dir: Path, data_dir: Path, tmp_path: Path, parallel: bool
) -> None:
    write_registry(config_dir, tool("span", "span.py", parallel_capable=parallel))
    runtime = await open_runtime(config_dir, data_dir)
    log = tmp_path / "spans.jsonl"
    try:
        results = await asyncio.gather(
            *(runtime.orchestrator.execute("span", {"log": str(log)}) for _ in range(3))
        )
    finally:
        await runtime.close()
    assert all(r.success for r in results)
    spans = sorted(json.loads(line) for line in log.read_text().splitlines())
    overlaps = any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))
    assert overlaps is parallel


@pytest.mark.processes
async def test_a_tool_added_from_the_command_line_is_callable_in_a_running_runtime(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_registry(config_dir)
    runtime = await open_runtime(config_dir, data_dir, watch=True)
    try:
        assert "word_count" not in {d.name for d, _ in runtime.orchestrator.tool_definitions()}
        entry = tmp_path / "word_count.json"
        entry.write_text(json.dumps(WORD_COUNT))
        added = await asyncio.to_thread(diana, config_dir, data_dir, "tools", "add", str(entry))
        assert added.returncode == 0, added.stderr
        assert "word_count added; tools.json now has 1 local tools" in added.stdout

        def listed() -> bool:
            return "word_count" in {d.name for d, _ in runtime.orchestrator.tool_definitions()}

        await until(listed, within=5)
        result = await runtime.orchestrator.execute("word_count", {"text": "a b"})
        assert result.data == {"words": 2}

        # A bad edit made by hand is reported; the tools in force stay.
        subscription = runtime.bus.subscribe()
        (config_dir / "tools.json").write_text('{"tools": [{"name": "oops"}]}')

        async def notice() -> str:
            while not isinstance(event := await subscription.get(), Notice):
                pass
            return event.message

        message = await asyncio.wait_for(notice(), 5)
        assert "tools.json not applied" in message
        assert "tools[0] (oops).description: Field required" in message
        assert listed()
    finally:
        await runtime.close()


def test_add_update_remove_validate_before_writing(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_registry(config_dir, WORD_COUNT)
    registry = config_dir / "tools.json"
    entry = tmp_path / "entry.json"

    entry.write_text(json.dumps(WORD_COUNT))
    again = diana_here(config_dir, data_dir, "tools", "add", str(entry))
    assert again.returncode == 2
    assert "a tool named word_count exists already; use update" in again.stderr

    before = registry.read_bytes()
    entry.write_text(json.dumps({**WORD_COUNT, "script": "/etc/passwd"}))
    bad = diana_here(config_dir, data_dir, "tools", "update", str(entry))
    assert bad.returncode == 2
    assert "tools[0] (word_count).script: must be a path inside the tools/ folder" in bad.stderr
    assert registry.read_bytes() == before  # refused before anything was written

    entry.write_text(json.dumps({**WORD_COUNT, "description": "Counts words."}))
    updated = diana_here(config_dir, data_dir, "tools", "update", str(entry))
    assert updated.returncode == 0, updated.stderr
    assert json.loads(registry.read_text())["tools"][0]["description"] == "Counts words."

    missing = diana_here(config_dir, data_dir, "tools", "remove", "nope")
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        "diana: no tool named nope to remove",
    )
    removed = diana_here(config_dir, data_dir, "tools", "remove", "word_count")
    assert removed.returncode == 0
    assert json.loads(registry.read_text()) == {"tools": []}


@pytest.mark.processes
async def test_code_execution_always_waits_for_a_person_even_when_policy_allows(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"code_execution": "allow"}}))
    runtime = await open_runtime(config_dir, data_dir)
    try:
        code = {"language": "python", "code": "import os\nprint(6 * 7, os.getcwd())"}
        held = await runtime.orchestrator.execute("code_execution", code, confidence=1.0)
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.proposal.status is ProposalStatus.SUCCEEDED
        assert decision.result is not None and decision.result.data["exit_code"] == 0
        answer, folder = decision.result.data["stdout"].split()
        assert answer == "42" and "diana-code-" in folder
        assert not Path(folder).exists()  # the temporary directory is gone
    finally:
        await runtime.close()


@pytest.mark.processes
async def test_runaway_code_is_killed_at_its_timeout_and_long_output_is_cut(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    settings["tools"] = {"timeouts": {"code_execution": 1}}
    (config_dir / "settings.json").write_text(json.dumps(settings))
    runtime = await open_runtime(config_dir, data_dir)
    pidfile = tmp_path / "sleeper.pid"
    try:
        runaway = {"language": "shell", "code": f"sleep 300 & echo $! > {pidfile}; wait"}
        held = await runtime.orchestrator.execute("code_execution", runaway)
        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.result is not None
        assert decision.result.error_code is ErrorCode.TOOL_EXECUTION_TIMEOUT
        sleeper = int(pidfile.read_text())
        await until(lambda: not alive(sleeper), within=3)

        chatty = {"language": "python", "code": "print('x' * 50000)"}
        held = await runtime.orchestrator.execute("code_execution", chatty)
        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.result is not None
        stdout = decision.result.data["stdout"]
        assert stdout.startswith("x" * 20000) and stdout.endswith("[cut: 30001 more characters]")
    finally:
        await runtime.close()


@contextlib.asynccontextmanager
async def tool_form(
    config_dir: Path, data_dir: Path, answer: str
) -> AsyncIterator[tuple[DianaApp, Pilot[int], ToolFormScreen]]:
    """The app with a shout.py script (returning ``answer``) and Ctrl+T's form open."""
    write_registry(config_dir)
    script = f"def run(arguments):\n    return {answer}\n"
    (config_dir / "tools" / "shout.py").write_text(script)
    app = make_app(config_dir, data_dir, clock=stepping_clock())
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+t")
        await until(lambda: isinstance(app.screen, ToolFormScreen))
        form = app.screen
        assert isinstance(form, ToolFormScreen)
        yield app, pilot, form


@pytest.mark.processes
async def test_the_form_adds_a_tool_and_keeps_what_was_typed_when_refused(
    config_dir: Path, data_dir: Path
) -> None:
    async with tool_form(config_dir, data_dir, "arguments['text'].upper()") as (app, pilot, form):
        await pilot.click("#tool-name")
        await pilot.press(*"shout")
        form.query_one("#tool-description").value = "Upper-case a text."  # type: ignore[attr-defined]
        form.query_one("#tool-script").value = "shout.py"  # type: ignore[attr-defined]
        form.query_one("#tool-parameters").text = '{"type": "array"}'  # type: ignore[attr-defined]
        await pilot.click("#tool-add")
        await until(lambda: "parameters" in str(form.query_one("#tool-error").render()))
        assert app.screen is form  # still open, nothing lost
        assert json.loads((config_dir / "tools.json").read_text()) == {"tools": []}

        schema = '{"type": "object", "properties": {"text": {"type": "string"}}}'
        form.query_one("#tool-parameters").text = schema  # type: ignore[attr-defined]
        form.query_one("#tool-risk").value = "reversible"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await until(lambda: app.screen is not form)
        written = json.loads((config_dir / "tools.json").read_text())["tools"]
        assert [(t["name"], t["risk"]) for t in written] == [("shout", "reversible")]
        assert app.core is not None
        orchestrator = app.core._runtime.orchestrator
        await until(lambda: "shout" in {d.name for d, _ in orchestrator.tool_definitions()})
        result = await orchestrator.execute("shout", {"text": "hi"})
        assert result.data == "HI"


async def test_enter_in_a_field_submits_the_form(config_dir: Path, data_dir: Path) -> None:
    async with tool_form(config_dir, data_dir, "'HI'") as (app, pilot, form):
        await pilot.press(*"shout", "enter")  # no description yet: refused, the form stays
        await until(lambda: "description" in str(form.query_one("#tool-error").render()))
        assert app.screen is form
        form.query_one("#tool-description").value = "Shout."  # type: ignore[attr-defined]
        form.query_one("#tool-script").value = "shout.py"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until(lambda: app.screen is not form)
        written = json.loads((config_dir / "tools.json").read_text())["tools"]
        assert [t["name"] for t in written] == ["shout"]


@pytest.mark.processes
async def test_a_large_answer_arrives_whole_and_one_past_the_limit_is_refused(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 10 MB answer used to be cut at 20,000 characters and then reported as "exit code 0".
    monkeypatch.setattr("diana.core.tools.local.RESULT_LIMIT", 12 << 20)
    SCRIPTS["big.py"] = "def run(arguments):\n    return 'x' * arguments['size']\n"
    try:
        size = {"type": "object", "properties": {"size": {"type": "integer"}}}
        write_registry(config_dir, tool("big", "big.py", parameters=size))
    finally:
        del SCRIPTS["big.py"]
    runtime = await open_runtime(config_dir, data_dir)
    try:
        whole = await runtime.orchestrator.execute("big", {"size": 10_000_000})
        past = await runtime.orchestrator.execute("big", {"size": 13_000_000})
    finally:
        await runtime.close()
    assert whole.success and whole.data == "x" * 10_000_000
    assert past.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert past.error == "big answered more than 12 MiB; its result was not kept"
