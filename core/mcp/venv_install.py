"""A PyPI server run from a virtual environment of its own, made under the data dir and
installed into before its first test (``VenvInstall``), or the program of that very version
when it is installed beside diana (``installed_program``)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..system.files import make_private, private_dir

SERVERS_DIR = "servers"  # under the data dir: virtual environments made for PyPI servers
PREPARE_TIMEOUT = 600.0  # seconds a virtual environment has to be made and installed into


class RegistryEntryError(Exception):
    """A registry entry that cannot be installed here, in words a person can act on."""


def installed_program(distribution: str, version: str) -> str | None:
    """The program of a PyPI distribution installed beside diana at exactly ``version``
    (its one console script, or the one named as the distribution); None otherwise."""
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    if found.version != version:
        return None
    scripts = [e.name for e in found.entry_points if e.group == "console_scripts"]
    wanted = distribution.lower().replace("_", "-")
    chosen = next(
        (s for s in scripts if s.lower() == wanted), scripts[0] if len(scripts) == 1 else None
    )
    if chosen is None:
        return None
    beside = Path(sys.executable).parent / chosen
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(chosen)


# -- a virtual environment for a PyPI server -----------------------------------------------

_SCRIPTS = (
    "import importlib.metadata as m, json, sys; "
    "print(json.dumps([e.name for e in m.distribution(sys.argv[1]).entry_points "
    "if e.group == 'console_scripts']))"
)


@dataclass(frozen=True)
class VenvInstall:
    """A PyPI package installed, at its pinned version, into a virtual environment of its
    own under the data dir (made once, kept for the server to run from)."""

    directory: Path
    requirement: str  # pkg==version
    distribution: str

    async def __call__(self) -> str:
        """Make the environment and install the package (pip, from the index pip is set up
        to use); the path of the package's program. RegistryEntryError saying why not."""
        private_dir(self.directory.parent)
        python = self.directory / "bin" / "python"
        if not python.exists():
            await _run([sys.executable, "-m", "venv", str(self.directory)], "making its venv")
        await _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                self.requirement,
            ],
            f"pip install {self.requirement}",
        )
        listed = await _run([str(python), "-c", _SCRIPTS, self.distribution], "finding its program")
        try:
            scripts = [str(s) for s in json.loads(listed)]
        except (ValueError, TypeError):
            scripts = []
        wanted = self.distribution.lower().replace("_", "-")
        only = scripts[0] if len(scripts) == 1 else None
        chosen = next((s for s in scripts if s.lower() == wanted), only)
        if chosen is None:
            raise RegistryEntryError(
                f"{self.requirement} has {len(scripts)} programs ({', '.join(scripts) or 'none'}); "
                "diana cannot tell which one is the server"
            )
        make_private(self.directory)  # made under the umask: the data dir stays yours alone
        return str(self.directory / "bin" / chosen)


async def _run(argv: list[str], what: str) -> str:
    """Run a step of an install, contained and bounded; its stdout. RegistryEntryError
    with the exit code and the last lines of stderr when it fails."""
    from ..system import processes

    tree = await processes.spawn(
        argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        try:
            out, err = await asyncio.wait_for(tree.process.communicate(), PREPARE_TIMEOUT)
        except TimeoutError:
            raise RegistryEntryError(f"{what}: gave up after {PREPARE_TIMEOUT:g} s") from None
    finally:
        await tree.close()
    if tree.process.returncode != 0:
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        tail = "; ".join(line.strip()[:200] for line in lines[-3:]) or "no message"
        raise RegistryEntryError(f"{what} failed (exit {tree.process.returncode}): {tail}")
    return out.decode(errors="replace")
