"""The attack bench's family of `private_file_cases()`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..cases import ALLOW_ALL, FACT, FIXTURE, Case, Ctx, Run
from ..configs import base, python_server
from .proposals import just_propose
from .sign_in import SIGNING_IN, OAuthServer, guarded


def private_files(ctx: Ctx, run: Run) -> list[str]:
    """Every folder under the data dir (itself included) 0700, every file 0600."""
    exposed = []
    for top, _dirs, names in os.walk(ctx.data):
        for path in [Path(top), *(Path(top) / name for name in names)]:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) or not stat.S_IMODE(info.st_mode) & 0o077:
                continue
            kind = "/" if stat.S_ISDIR(info.st_mode) else ""
            exposed.append(f"{path.relative_to(ctx.dir)}{kind} is {stat.S_IMODE(info.st_mode):04o}")
    if not exposed:
        return []
    more = f" (and {len(exposed) - 2} more)" if len(exposed) > 2 else ""
    return [f"others may read the data dir: {', '.join(exposed[:2])}{more}"]


def private_file_cases(oauth: OAuthServer) -> list[Case]:
    fixture = {"fx": python_server(FIXTURE, timeout=10)}
    return [
        Case(
            "private files",
            "call save_fact, umask 022",
            ["call", "save_fact", "--args", FACT],
            ok=(0,),
            setup=lambda ctx: base(ctx, policy=ALLOW_ALL),
            verify=private_files,
            short=True,
        ),
        Case(
            "private files",
            "approve a proposal, umask 000",
            lambda c: ["approve", c.state["id"]],
            ok=(0,),
            setup=just_propose,
            verify=private_files,
            umask=0,
        ),
        Case(
            "private files",
            "an image a tool returned, umask 022",
            ["call", "fx_picture"],
            ok=(0,),
            setup=lambda ctx: base(ctx, servers=fixture, policy={"servers": {"fx": "allow"}}),
            verify=private_files,
        ),
        Case(
            "private files",
            "login, umask 022",
            ["login", "guarded"],
            ok=(0,),
            setup=lambda ctx: guarded(ctx, oauth),
            verify=private_files,
            prefixes=SIGNING_IN,
            max_lines=4,
        ),
    ]
