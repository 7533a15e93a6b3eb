"""`diana servers search|install|remove|test`: servers found in the MCP Registry, added
after a real test, and configured ones removed or tested, all through the MCP sub-agent (so
mcp-servers.json is written by its one writer, and only for a server that works)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from diana.core.api import parse_json
from diana.core.api.errors import JSONProblem, RegistryEntryError, RegistryError, RequestFailed
from diana.core.api.shown import plan_lines
from diana.core.api.types import InstallPlan, RequestState, Setting, SubagentRequest

from .common import EXIT_OK, EXIT_TOOL_FAILED, BadInput, Failed, _dump, _err, _line, _table

if TYPE_CHECKING:
    from diana.core.api import Core


async def cmd_search(core: Core, args: argparse.Namespace) -> int:
    if not args.name or not args.name.strip():
        raise BadInput("give a word to search for: diana servers search QUERY")
    try:
        answer = await core.registry_search(args.name, limit=args.limit)
    except RegistryError as exc:
        raise Failed(str(exc)) from None
    if answer.offline:
        _err(f"diana: offline: {_line(answer.offline)}")
    if args.json:
        print(_dump(core.registry_public(answer)["servers"]))
        return EXIT_OK
    if not answer.servers:
        print(f"No server in {core.registry_url} has {args.name!r} in its name.")
        return EXIT_OK
    rows = []
    for found in core.registry_public(answer)["servers"]:
        needs = ", ".join(
            s["name"] + (" (secret)" if s["secret"] else "") for s in found["required_settings"]
        )
        rows.append(
            (
                found["name"],
                found["version"],
                found["status"],
                found["title"] or "",
                found["description"],
                found["runs"],
                needs,
            )
        )
    headers = ("NAME", "VERSION", "STATUS", "TITLE", "DESCRIPTION", "RUNS", "NEEDS")
    # On a narrow terminal the title and version go first, then how it runs is cut, then
    # the description is cut, then left out; the name and status are never cut.
    gives_way = {"TITLE": 0, "VERSION": 0, "RUNS": 16, "DESCRIPTION": 12, "NEEDS": 8}
    print(_table(rows, headers, gives_way, drop=("DESCRIPTION",)))
    if answer.next_cursor:
        print(f"(more in the registry: --limit {min(args.limit * 2, 100)} lists more)")
    return EXIT_OK


def _given(pairs: list[str] | None) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs or []:
        key, found, value = pair.partition("=")
        if not found or not key.strip():
            raise BadInput(f"--env {pair.split('=')[0]!r}: expected KEY=VALUE")
        values[key.strip()] = value
    return values


async def cmd_install(core: Core, args: argparse.Namespace) -> int:
    """Build the entry from the registry, ask for what it needs, test it, write it."""
    if not args.name:
        raise BadInput("give the server's registry name: diana servers install NAME")
    try:
        found = await core.registry_server(args.name, args.version)
    except RegistryError as exc:
        raise Failed(str(exc)) from None
    except RegistryEntryError as exc:
        raise BadInput(str(exc)) from None
    if found.deprecated and not args.allow_deprecated:
        raise BadInput(
            f"{found.name} is {found.status} in the registry; --allow-deprecated installs it anyway"
        )
    try:
        plan = core.install_plan(found)
    except RegistryEntryError as exc:
        raise Failed(f"{found.name} cannot run here: {exc}") from None
    name = args.as_ or plan.server_name
    values = _given(args.env)
    values = {**values, **(await _ask_missing(plan, values))}
    try:
        entry = plan.entry(values)
        await core.check_remote(plan, values)
        shown = plan.shown(values)
    except RegistryEntryError as exc:
        raise BadInput(str(exc)) from None
    _err(f"Installing {found.name} {plan.version} as {name}: {plan.how}")
    for line in plan_lines(shown):
        _err(_line(f"  {line}"))
    _err("Testing it (connect, list tools) before anything is written …")
    request = core.server_requests.add_server(name, entry, origin="cli", prepare=plan.prepare)
    return _reported(await core.server_requests.wait(request.id))


async def _ask_missing(plan: InstallPlan, given: dict[str, str]) -> dict[str, str]:
    """Each required setting not given, asked on the terminal (a secret without echo; Enter
    takes a variable the environment has as a ${NAME} reference); no terminal: named."""
    missing = plan.missing(given)
    if not missing:
        return {}
    asked: dict[str, str] = {}
    if not sys.stdin.isatty():
        names = ", ".join(s.name for s in missing)
        raise BadInput(
            f"{plan.registry_name} needs {names}: give --env NAME=VALUE for each, or "
            "--env NAME='${NAME}' to take it from the environment (there is no terminal to "
            "ask on)"
        )
    from .ask import terminal_turn

    async with terminal_turn("diana servers install"):
        for setting in missing:
            asked[setting.name] = await _ask_one(setting)
    return asked


async def _ask_one(setting: Setting) -> str:
    from .ask import read_line

    kind = {"env": "environment variable", "header": "header", "argument": "argument"}
    what = f"{setting.name} ({kind[setting.kind]}{', secret: not shown' if setting.secret else ''})"
    _err(_line(f"? {what}"))
    if setting.description:
        _err(_line(f"    {setting.description}"))
    if setting.choices:
        _err(_line("    one of: " + " | ".join(setting.choices)))
    # A variable this environment has can be kept there: the file then holds a reference.
    reference = f"${{{setting.name}}}" if setting.name in os.environ else None
    if reference:
        _err(_line(f"    Enter: write {reference}, taken from the environment wherever diana runs"))
    while True:
        _err("  > ", end="")
        typed = await read_line(echo=not setting.secret)
        if typed is None:
            raise BadInput(f"{setting.name} was not given (the terminal closed)")
        if not typed.strip() and reference is not None:
            return reference
        if typed.strip():
            if setting.choices and typed.strip() not in setting.choices:
                _err("    not one of the choices")
                continue
            return typed.strip() if not setting.secret else typed
        _err("    required")


def _reported(request: SubagentRequest) -> int:
    """How a sub-agent request ended, said as the command's own outcome."""
    if request.state is RequestState.COMPLETED:
        print(_line(request.message))
        return EXIT_OK
    _err(f"diana: {request.server}: {_line(request.message)}")
    if request.stderr_tail:
        _err("  its stderr, last lines:")
        for line in request.stderr_tail:
            _err(f"    {_line(line)}")
    if request.kind.value in ("add_server", "modify_server", "remove_server"):
        _err("  mcp-servers.json was not changed.")
    return EXIT_TOOL_FAILED


async def cmd_remove(core: Core, args: argparse.Namespace) -> int:
    if not args.name:
        raise BadInput("give the name of the server to remove")
    request = core.server_requests.remove_server(args.name, origin="cli")
    return _reported(await core.server_requests.wait(request.id))


async def cmd_test(core: Core, args: argparse.Namespace) -> int:
    if not args.name:
        raise BadInput("give the name of the server to test")
    request = core.server_requests.test_server(args.name, origin="cli")
    finished = await core.server_requests.wait(request.id)
    if args.json and finished.state is RequestState.COMPLETED:
        shown: dict[str, Any] = finished.public()
        print(_dump(shown))
        return EXIT_OK
    return _reported(finished)


def _edited(entry: dict[str, Any], sets: list[str], unsets: list[str]) -> dict[str, Any]:
    """The entry with each ``FIELD=VALUE`` set (a dotted FIELD reaches into env, headers,
    auth; VALUE is read as JSON when it is JSON, else as text) and each FIELD taken out."""
    edited = json.loads(json.dumps(entry))
    for pair in sets:
        field, found, raw = pair.partition("=")
        if not found or not field.strip():
            raise BadInput(f"--set {pair.split('=')[0]!r}: expected FIELD=VALUE")
        *path, last = field.strip().split(".")
        try:  # environment and header values are text whatever they look like
            value: Any = raw if path[:1] in (["env"], ["headers"]) else parse_json(raw)
        except JSONProblem:
            value = raw
        at = edited
        for part in path:
            inner = at.setdefault(part, {})
            if not isinstance(inner, dict):
                raise BadInput(f"--set {field}: {part} is not an object")
            at = inner
        at[last] = value
    for field in unsets:
        *path, last = field.strip().split(".")
        at = edited
        for part in path:
            at = at.get(part) if isinstance(at, dict) else None
        if not isinstance(at, dict) or last not in at:
            raise BadInput(f"--unset {field}: the entry has no such field")
        del at[last]
    return edited


async def cmd_edit(core: Core, args: argparse.Namespace) -> int:
    """Change a configured server's entry; it is tested as changed before it is written."""
    if not args.name:
        raise BadInput("give the name of the server to edit")
    if not args.set and not args.unset:
        raise BadInput("give what to change: --set FIELD=VALUE or --unset FIELD")
    try:
        entry = core.server_requests.written(args.name)
    except RequestFailed as exc:
        raise BadInput(str(exc)) from None
    edited = _edited(entry, args.set or [], args.unset or [])
    if edited == entry:
        print(f"{args.name}: nothing to change.")
        return EXIT_OK
    _err(f"Testing {args.name} as changed (connect, list tools) before anything is written …")
    request = core.server_requests.modify_server(args.name, edited, origin="cli")
    return _reported(await core.server_requests.wait(request.id))
