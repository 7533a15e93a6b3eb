"""Config is read strictly: a config file that is there but is not a readable regular file
is an error naming it, never a fall-back to the shipped defaults (a policy must not fail
open), and reading one never blocks (a FIFO) or runs without bound (/dev/zero, a huge file).

Real files, real FIFOs, real symlinks and a real socket. Anything that could block on the
code before this change runs in a daemon thread (``promptly``) or a subprocess with a
timeout, so a regression fails the test instead of hanging the run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from diana.core.approvals.policy import Policy, Rule
from diana.core.config.settings import ConfigError, Paths, read_json
from diana.core.config.writer import writer_for
from diana.core.events import Notice, Subscription
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .commands import diana, diana_argv
from .configs import WORD_COUNT
from .conftest import stepping_clock

T = TypeVar("T")

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # the promised limit: 4 MiB

CONFIG_FILES = ["settings.json", "mcp-servers.json", "tools.json", "policy.json"]
# The smallest valid content of each file, for the oversized case (valid but too large).
VALID = {
    "settings.json": {},
    "mcp-servers.json": [],
    "tools.json": {"tools": []},
    "policy.json": {},
}
# Each way a config path can be there without being a readable regular file, and the words
# the error must use for it.
BAD_FORMS = {
    "dangling link": "which does not exist",
    "link loop": "symbolic link that loops",
    "FIFO": "is a FIFO (named pipe), not a regular file",
    "directory": "is a directory, not a regular file",
    "link to /dev/zero": "is a symbolic link to /dev/zero, a character device",
    "oversized": "larger than 4 MiB",
}
DENY_SAVE_FACT = {"tools": {"save_fact": "deny"}}


def make_bad(path: Path, form: str) -> None:
    """Put ``form`` at ``path`` (which must not exist)."""
    if form == "dangling link":
        path.symlink_to(path.parent / "gone" / path.name)
    elif form == "link loop":
        other = path.with_name(f"{path.name}.loop")
        path.symlink_to(other.name)
        other.symlink_to(path.name)
    elif form == "FIFO":
        os.mkfifo(path)
    elif form == "directory":
        path.mkdir()
    elif form == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif form == "oversized":
        path.write_text(json.dumps(VALID[path.name]) + " " * MAX_CONFIG_BYTES)
    else:
        raise AssertionError(form)


def replace_with_bad(path: Path, form: str) -> None:
    path.unlink(missing_ok=True)
    make_bad(path, form)


def promptly(work: Callable[[], T], within: float = 15) -> T:
    """``work()``'s result (or its exception), failing the test if it is still blocked after
    ``within`` seconds."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the test's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"still blocked after {within} s"
    done, value = outcome[0]
    if not done:
        raise value
    return value  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def unblock_fifo_readers(tmp_path: Path) -> Iterator[None]:
    """Should a reader be stuck opening one of the test's FIFOs, open its write end, so the
    reader sees end of file and its thread ends."""
    yield
    for fifo in tmp_path.rglob("*"):
        if fifo.is_fifo():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # nobody is reading it


def open_runtime(config_dir: Path, data_dir: Path) -> None:
    """Runtime.open and close, in a thread of its own, within the time ``promptly`` allows."""

    async def start_and_stop() -> None:
        runtime = await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        )
        await runtime.close()

    promptly(lambda: asyncio.run(start_and_stop()))


async def next_notice(subscription: Subscription, within: float = 10) -> Notice:
    async def notice() -> Notice:
        while not isinstance(event := await subscription.get(), Notice):
            pass
        return event

    return await asyncio.wait_for(notice(), within)


# -- reading one file ------------------------------------------------------------------------


@pytest.mark.parametrize("form", BAD_FORMS)
def test_a_config_file_that_is_not_a_readable_regular_file_is_an_error_naming_it(
    tmp_path: Path, form: str
) -> None:
    path = tmp_path / "policy.json"
    make_bad(path, form)
    with pytest.raises(ConfigError) as raised:
        promptly(lambda: read_json(path))
    assert str(raised.value).startswith(f"{path}: ")
    assert BAD_FORMS[form] in str(raised.value)


def test_a_socket_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative name: a socket's path has a short length limit
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("policy.json")
        with pytest.raises(ConfigError, match=r"policy\.json: is a socket"):
            promptly(lambda: read_json(tmp_path / "policy.json"))


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "policy.json"
    real.parent.mkdir()
    real.write_text(json.dumps(DENY_SAVE_FACT))
    (tmp_path / "policy.json").symlink_to(real)
    assert read_json(tmp_path / "policy.json") == DENY_SAVE_FACT


def test_a_file_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text("{}" + " " * (MAX_CONFIG_BYTES - 2))
    assert read_json(path) == {}


# -- every config file, through Runtime.open -------------------------------------------------


@pytest.mark.parametrize("form", BAD_FORMS)
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_runtime_open_refuses_a_config_file_that_cannot_be_read(
    config_dir: Path, data_dir: Path, name: str, form: str
) -> None:
    replace_with_bad(config_dir / name, form)
    with pytest.raises(ConfigError) as raised:
        open_runtime(config_dir, data_dir)
    assert str(raised.value).startswith(f"{config_dir / name}: ")
    assert BAD_FORMS[form] in str(raised.value)
    assert not data_dir.exists()  # refused before anything was written


def test_a_config_file_that_does_not_exist_is_taken_from_the_shipped_defaults(
    config_dir: Path,
) -> None:
    paths = Paths(config_dir, config_dir / "data")
    assert paths.config_file("policy.json").parent != config_dir
    (config_dir / "policy.json").symlink_to(config_dir / "nowhere.json")
    assert paths.config_file("policy.json") == config_dir / "policy.json"  # not a fall-back


# -- the config dir --------------------------------------------------------------------------


def test_a_config_dir_that_is_a_regular_file_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "config"
    file.write_text("{}")
    with pytest.raises(ConfigError, match=f"^{file}: is a regular file, not a directory"):
        Paths.resolve(file, tmp_path / "data")
    monkeypatch.setenv("DIANA_CONFIG_DIR", str(file))
    with pytest.raises(ConfigError, match=f"^{file}: is a regular file, not a directory"):
        Paths.resolve(None, tmp_path / "data")


def test_a_config_dir_that_is_a_dangling_link_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config").symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"config: is a symbolic link to .*gone, which does not"):
        Paths.resolve(tmp_path / "config", tmp_path / "data")


def test_a_missing_config_dir_means_all_defaults(tmp_path: Path) -> None:
    paths = Paths.resolve(tmp_path / "no-such-dir", tmp_path / "data")
    assert paths.config_file("policy.json").parent != paths.config_dir
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    assert Paths.resolve(linked, tmp_path / "data").config_dir == linked  # a link to a dir is fine


# -- the CLI: the policy does not fail open --------------------------------------------------


def facts_saved(config_dir: Path, data_dir: Path) -> list[str]:
    found = diana(
        config_dir, data_dir, "call", "search_memory", "--args", '{"query": "tea"}', "--json"
    )
    assert found.returncode == 0, found.stderr
    return [r["content"] for r in json.loads(found.stdout)["data"]["results"]]


@pytest.mark.processes
def test_a_denying_policy_replaced_by_a_dangling_link_stops_the_call(
    config_dir: Path, data_dir: Path
) -> None:
    policy = config_dir / "policy.json"
    policy.write_text(json.dumps(DENY_SAVE_FACT))
    save = ("call", "save_fact", "--args", '{"content": "Ada likes tea"}', "--json")
    denied = diana(config_dir, data_dir, *save)
    assert json.loads(denied.stdout)["error_code"] == ErrorCode.DENIED_BY_POLICY.value

    replace_with_bad(policy, "dangling link")
    done = diana(config_dir, data_dir, *save)
    assert done.returncode == 2
    assert f"config error in {policy}: is a symbolic link to" in done.stderr
    assert "which does not exist" in done.stderr
    assert "Traceback" not in done.stderr

    policy.unlink()  # only a policy that is not there at all means the shipped one
    assert facts_saved(config_dir, data_dir) == []  # nothing ran


@pytest.mark.processes
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_config_file_that_is_a_fifo_fails_the_cli_at_once(
    config_dir: Path, data_dir: Path, name: str
) -> None:
    replace_with_bad(config_dir / name, "FIFO")
    done = subprocess.run(
        diana_argv(config_dir, data_dir, "tools", "--json"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert f"config error in {config_dir / name}: is a FIFO" in done.stderr


@pytest.mark.processes
@pytest.mark.parametrize("name", ["config", os.fsdecode(b"config-\xff")])
def test_a_config_dir_option_naming_a_regular_file_exits_2(tmp_path: Path, name: str) -> None:
    file = tmp_path / name  # a name that is not UTF-8 is still that file, not another path
    file.write_text("{}")
    done = diana(file, tmp_path / "data", "tools", "--json")
    assert done.returncode == 2
    assert "config error in" in done.stderr
    assert ": is a regular file, not a directory" in done.stderr


# -- while running: report it, keep the last good config -------------------------------------


@pytest.mark.parametrize("form", BAD_FORMS)
def test_a_policy_that_becomes_unreadable_keeps_its_rules_and_says_so(
    tmp_path: Path, form: str
) -> None:
    user_file = tmp_path / "policy.json"
    user_file.write_text(json.dumps(DENY_SAVE_FACT))
    paths = Paths(tmp_path, tmp_path / "data")
    errors: list[ConfigError] = []
    policy = Policy(lambda: paths.config_file("policy.json"), user_file, errors.append)
    replace_with_bad(user_file, form)
    for _ in range(2):
        match = promptly(lambda: policy.rule_for("save_fact", None))
        assert match is not None and match.rule is Rule.DENY
    assert [str(e).split(": ")[0] for e in errors] == [str(user_file)]  # said once
    assert BAD_FORMS[form] in str(errors[0])


async def test_a_running_runtime_keeps_denying_when_the_policy_turns_into_a_dangling_link(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "policy.json").write_text(json.dumps(DENY_SAVE_FACT))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        replace_with_bad(config_dir / "policy.json", "dangling link")
        result = await runtime.orchestrator.execute("save_fact", {"content": "Ada likes tea"})
        assert result.error_code is ErrorCode.DENIED_BY_POLICY
        notice = await next_notice(events)
        assert notice.level == "error"
        assert f"policy.json not applied: {config_dir / 'policy.json'}: " in notice.message
        assert (await runtime.memory.search("tea", 10)).hits == []


@pytest.mark.parametrize("name", ["tools.json", "mcp-servers.json"])
async def test_a_watched_file_that_becomes_a_dangling_link_is_reported_and_not_applied(
    config_dir: Path, data_dir: Path, name: str
) -> None:
    (config_dir / "tools.json").write_text(json.dumps({"tools": [WORD_COUNT]}))
    async with await Runtime.open(
        Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        replace_with_bad(config_dir / name, "dangling link")
        notice = await next_notice(events)
        assert notice.level == "error"
        assert f"{name} not applied" in notice.message
        assert "which does not exist" in notice.message
        names = {d.name for d, _ in runtime.orchestrator.tool_definitions()}
        assert "word_count" in names  # the tools in force stay


# -- the writer ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", BAD_FORMS)
def test_a_rule_is_not_written_over_a_policy_that_cannot_be_read(tmp_path: Path, form: str) -> None:
    path = tmp_path / "policy.json"
    make_bad(path, form)
    before = os.lstat(path)
    writer = writer_for(path)
    with pytest.raises(ConfigError, match=re.escape(BAD_FORMS[form])):
        # In a thread with its own loop: a reader stuck on the FIFO must not hold this one.
        promptly(lambda: asyncio.run(writer.update(lambda current: {**current}, lambda v, p: None)))
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # left as it was
    assert not (tmp_path / "gone").exists()  # a dangling link's target is not created


async def test_a_rule_is_written_through_a_symlink_to_a_regular_file(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "policy.json"
    real.parent.mkdir()
    real.write_text(json.dumps(DENY_SAVE_FACT))
    link = tmp_path / "config" / "policy.json"
    link.parent.mkdir()
    link.symlink_to(real)
    policy = Policy(lambda: link, link)
    await policy.set_tool_rule("files_write", Rule.ALLOW)
    assert link.is_symlink()
    assert json.loads(real.read_text())["tools"] == {"save_fact": "deny", "files_write": "allow"}


@pytest.mark.parametrize("name", CONFIG_FILES)
@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[" + "1" * 5000 + "]", "a number has more than 4,300 digits"),
        ('{"tools": {"save_fact": "deny", "save_fact": "allow"}}', 'the key "save_fact" is given'),
    ],
)
def test_json_that_cannot_be_read_one_way_is_an_error_naming_the_file(
    config_dir: Path, name: str, content: str, words: str
) -> None:
    path = config_dir / name
    path.write_text(content)
    with pytest.raises(ConfigError) as error:
        read_json(path)
    assert error.value.path == path and words in error.value.message


@pytest.mark.processes
def test_a_deny_given_twice_with_an_allow_is_refused_not_read_as_the_last(
    config_dir: Path, data_dir: Path
) -> None:
    policy = config_dir / "policy.json"
    policy.write_text('{"tools": {"save_fact": "deny", "save_fact": "allow"}}')
    done = diana(config_dir, data_dir, "call", "save_fact", "--args", '{"content": "x"}')
    assert done.returncode == 2
    assert done.stderr == (
        f'diana: config error in {policy}: the key "save_fact" is given twice in one object\n'
    )
    policy.unlink()
    assert facts_saved(config_dir, data_dir) == []


@pytest.mark.processes
@pytest.mark.parametrize("where", ["OLLAMA_HOST", "settings.json"])
def test_an_ollama_address_that_is_not_one_is_a_config_error_where_it_is_used(
    config_dir: Path, data_dir: Path, where: str
) -> None:
    """A bad llm.host in settings.json stops every command, as any malformed setting does;
    a bad OLLAMA_HOST stops the commands that talk to Ollama, never with a traceback (the
    ollama package raised at import on one)."""
    env = dict(os.environ, OLLAMA_HOST="http://[::1")
    if where == "settings.json":
        (config_dir / "settings.json").write_text(json.dumps({"llm": {"host": "http://[::1"}}))
        env.pop("OLLAMA_HOST")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = diana_argv(config_dir, data_dir, *args)
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    named = (
        "the environment variable OLLAMA_HOST"
        if where == "OLLAMA_HOST"
        else f"{config_dir / 'settings.json'}: llm.host"
    )
    problem = (
        f"diana: config error in {named}: 'http://[::1' is not an address (Invalid IPv6 URL)\n"
    )
    asked = run("ask", "hello")
    assert (asked.returncode, asked.stderr) == (2, problem)
    listed = run("proposals")
    if where == "settings.json":
        assert (listed.returncode, listed.stderr) == (2, problem)
    else:  # a command that does not talk to Ollama does not read the variable
        assert (listed.returncode, listed.stdout) == (0, "No pending proposals.\n")
