"""What diana keeps is its owner's alone: the data dir is 0700 and every folder in it 0700,
every file 0600 (the database with its -wal and -shm, logs, OAuth tokens, media, the proposal
key and ledger, lock files), whatever the umask; a data dir others could read is made private,
with one line saying so."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .browsers import BROWSER
from .commands import diana_argv, diana_here
from .oauth_guard import Guarded
from .scenarios import app_of, build_app
from .waits import started

FIXTURES = Path(__file__).parent / "fixtures"
# Opens a runtime (as the app does, sharing its state), keeps an image a tool returned, and
# says the mode of everything under the data dir while the database is open.
RUNTIME = """
import asyncio, json, os, stat, sys
from pathlib import Path
from diana.core.runtime import Profile, Runtime

async def main(config_dir, data_dir):
    profile = Profile.APP.but(chat=False, watch=False)
    async with await Runtime.open(profile, config_dir, data_dir) as runtime:
        await runtime.mcp.wait_ready()
        result = await runtime.orchestrator.execute("fx_picture", {})
        assert result.success, result.error
        print(json.dumps(modes(Path(data_dir))))

def modes(root):
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}

os.umask(int(sys.argv[3], 8))
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def configure(config_dir: Path, tmp_path: Path, **more: dict[str, object]) -> None:
    servers = {
        "fx": {"command": sys.executable, "args": [str(FIXTURES / "mcp_fixture.py")]},
        "gate": {
            "command": sys.executable,
            "args": [
                str(FIXTURES / "gate_server.py"),
                "--side-effects",
                str(tmp_path / "effects.txt"),
            ],
        },
        **more,
    }
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    policy = {"servers": {"fx": "allow", "guarded": "allow"}}
    (config_dir / "policy.json").write_text(json.dumps(policy))


def with_umask(umask: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run under ``umask`` (set by the shell that then becomes it)."""
    return subprocess.run(
        ["/bin/sh", "-c", f'umask {umask:03o}; exec "$@"', "sh", *argv],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "BROWSER": BROWSER},
    )


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}


def loose(root: Path, found: dict[str, int]) -> dict[str, str]:
    """What is not private: folders other than 0700, files other than 0600."""
    wrong = {}
    for name, mode in found.items():
        wanted = 0o700 if (root / name).is_dir() else 0o600
        if mode != wanted:
            wrong[name] = oct(mode)
    return wrong


@pytest.mark.processes  # the umask is the process's own, given it by the shell that starts it
@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_the_command_line_keeps_everything_private_whatever_the_umask(
    guarded: Guarded,
    config_dir: Path,
    data_dir: Path,
    tmp_path: Path,
    umask: int,
) -> None:
    configure(config_dir, tmp_path, guarded={"url": guarded.url})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = with_umask(umask, diana_argv(config_dir, data_dir, *args))
        assert done.returncode in (0, 3), done.stderr  # 3: held for approval
        return done

    run("login", "guarded")
    run("call", "fx_picture")
    held = run("call", "gate_append_line", "--args", '{"line": "kept"}')
    run("approve", held.stdout.split()[-1])

    found = modes(data_dir)
    kept = {"diana.db", "proposals.key", "proposals.runs", "oauth/guarded.json"}
    assert kept <= set(found)
    assert any(name.startswith("logs/") for name in found)
    assert any(name.startswith("media/") for name in found)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert loose(data_dir, found) == {}


@pytest.mark.processes
@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_the_runtime_keeps_its_database_wal_and_app_locks_private_whatever_the_umask(
    config_dir: Path, data_dir: Path, tmp_path: Path, umask: int
) -> None:
    configure(config_dir, tmp_path)
    script = tmp_path / "runtime.py"
    script.write_text(RUNTIME)

    done = with_umask(
        umask, [sys.executable, str(script), str(config_dir), str(data_dir), f"{umask:o}"]
    )

    assert done.returncode == 0, done.stderr
    while_open = json.loads(done.stdout.splitlines()[-1])
    assert {"diana.db", "diana.db-wal", "diana.db-shm", "apps"} <= set(while_open)
    assert any(name.startswith("media/") for name in while_open)
    assert loose(data_dir, {k: v for k, v in while_open.items() if (data_dir / k).exists()}) == {}
    assert {k: oct(v) for k, v in while_open.items() if k.startswith("diana.db")} == {
        "diana.db": "0o600",
        "diana.db-wal": "0o600",
        "diana.db-shm": "0o600",
    }
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700


def test_a_data_dir_others_could_read_is_made_private_saying_so_once(
    config_dir: Path, data_dir: Path
) -> None:
    def log() -> subprocess.CompletedProcess[str]:
        return diana_here(config_dir, data_dir, "log")

    assert log().returncode == 0
    os.chmod(data_dir, 0o755)
    os.chmod(data_dir / "diana.db", 0o644)
    os.chmod(data_dir / "logs", 0o755)

    first, second = log(), log()

    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines() == [
        f"diana: the data dir {data_dir} was readable by others (3 entries): made private "
        "(folders 0700, files 0600)"
    ]
    assert loose(data_dir, modes(data_dir)) == {}
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert second.stderr == ""


async def test_the_app_says_it_made_the_data_dir_private(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    (data_dir / "notes.txt").write_text("mine")
    os.chmod(data_dir / "notes.txt", 0o644)

    async with app.run_test(size=(120, 35)) as pilot:
        await started(app_of(pilot))
        told = [n.message for n in app._notifications]

    assert f"the data dir {data_dir} was readable by others (2 entries)" in " ".join(told)
    assert loose(data_dir, modes(data_dir)) == {}
