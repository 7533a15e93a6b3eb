"""The MCP Registry: finding servers, and the config entry that runs one.

Any registry speaking the official MCP Registry API (``settings.json`` ``"registry": {"url":
...}``, by default https://registry.modelcontextprotocol.io) is asked ``GET
/v0.1/servers?search=&limit=&cursor=`` (``/v0/servers`` for an older one) and ``GET
/v0.1/servers/{name}/versions/{version|latest}``. Each entry is a ``server.json``: name, title,
description, version, repository, ``packages`` (npm, pypi, oci, ...: identifier, version,
transport, environment variables, arguments) and ``remotes`` (streamable-http or sse URLs with
headers), with the registry's ``_meta`` (status, whether it is the latest version).

What a registry answers is data from outside: its size, the number of entries and every text
in them are bounded, and nothing in it is followed as an instruction. Answers are kept in a
cache under the data dir for ``registry.cache_ttl`` seconds; when the registry cannot be
reached, the cache answers (however old) and says so.

``plan_install`` turns an entry into an mcp-servers.json entry pinned to its version, run the
way this machine can: an npm package with ``npx -y pkg@version``, a PyPI package with ``uvx
pkg==version``, else ``pipx run``, else the package's own program when that very version is
installed beside diana; an OCI image with docker or podman; a remote by its URL. What the
entry needs from a person (required environment variables, headers, arguments) is listed as
settings, secrets marked.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..clock import Clock
from ..config import RegistrySettings
from ..files import make_private, private_dir, write_private
from ..jsontext import JSONProblem, parse_json
from ..text import cut_text, printable

REGISTRY_DIR = "registry"  # under the data dir: the cache of the registry's answers
SERVERS_DIR = "servers"  # under the data dir: virtual environments made for PyPI servers
PREPARE_TIMEOUT = 600.0  # seconds a virtual environment has to be made and installed into
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # a registry answer past this is refused
MAX_SERVERS = 100  # entries kept from one answer
MAX_PACKAGES = 16  # packages, remotes, arguments, variables kept per entry
MAX_TEXT = 1000  # characters kept of a description
MAX_FIELD = 300  # characters kept of a name, identifier, version, URL
SEARCH_LIMIT = 100  # the most a search asks for (the official registry's page size limit)
OFFICIAL_META = "io.modelcontextprotocol.registry/official"

Which = Callable[[str], str | None]


class RegistryError(Exception):
    """The registry could not answer, and the cache holds nothing for the question."""


class RegistryEntryError(Exception):
    """A registry entry that cannot be installed here, in words a person can act on."""


# -- server.json, read leniently and bounded ----------------------------------------------------


def _bounded(value: Any, limit: int = MAX_FIELD) -> Any:
    if isinstance(value, str):
        return cut_text(printable(value, multiline=False), limit)
    return value


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Input(_Lenient):
    """A value a server takes: an environment variable, a header or an argument."""

    name: str | None = None
    description: str | None = None
    is_required: bool = Field(default=False, alias="isRequired")
    is_secret: bool = Field(default=False, alias="isSecret")
    value: str | None = None
    default: str | None = None
    choices: list[str] = Field(default_factory=list, max_length=1000)
    # Arguments only: positional or named (a --flag), and a positional one's label.
    type: str | None = None
    value_hint: str | None = Field(default=None, alias="valueHint")

    @field_validator("name", "value", "default", "type", "value_hint", mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        return _bounded(value)

    @field_validator("description", mode="before")
    @classmethod
    def _long(cls, value: Any) -> Any:
        return _bounded(value, MAX_TEXT)

    @property
    def label(self) -> str:
        return self.name or self.value_hint or "value"


def _bounded_list(value: Any) -> Any:
    return value[:MAX_PACKAGES] if isinstance(value, list) else value


class Transport(_Lenient):
    type: str = "stdio"
    url: str | None = None
    headers: list[Input] = Field(default_factory=list)

    @field_validator("headers", mode="before")
    @classmethod
    def _few(cls, value: Any) -> Any:
        return _bounded_list(value)


class Package(_Lenient):
    registry_type: str = Field(alias="registryType")
    identifier: str
    version: str | None = None
    transport: Transport = Field(default_factory=Transport)
    runtime_hint: str | None = Field(default=None, alias="runtimeHint")
    runtime_arguments: list[Input] = Field(default_factory=list, alias="runtimeArguments")
    package_arguments: list[Input] = Field(default_factory=list, alias="packageArguments")
    environment_variables: list[Input] = Field(default_factory=list, alias="environmentVariables")

    @field_validator("registry_type", "identifier", "version", "runtime_hint", mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        return _bounded(value)

    @field_validator(
        "runtime_arguments", "package_arguments", "environment_variables", mode="before"
    )
    @classmethod
    def _few(cls, value: Any) -> Any:
        return _bounded_list(value)


class Remote(Transport):
    type: str = "streamable-http"


class ServerJSON(_Lenient):
    name: str = Field(min_length=1)
    title: str | None = None
    description: str = ""
    version: str = ""
    repository: dict[str, Any] | None = None
    website_url: str | None = Field(default=None, alias="websiteUrl")
    packages: list[Package] = Field(default_factory=list)
    remotes: list[Remote] = Field(default_factory=list)
    status: str | None = None  # older registries put it here, newer ones in _meta

    @field_validator("name", "title", "version", "website_url", "status", mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        return _bounded(value)

    @field_validator("description", mode="before")
    @classmethod
    def _long(cls, value: Any) -> Any:
        return _bounded(value, MAX_TEXT) if value is not None else ""

    @field_validator("packages", "remotes", mode="before")
    @classmethod
    def _few(cls, value: Any) -> Any:
        return _bounded_list(value)


@dataclass(frozen=True)
class RegistryServer:
    """One entry of the registry, as read, with the registry's word on it."""

    server: ServerJSON
    status: str = "active"  # active, deprecated or deleted
    is_latest: bool = True
    published_at: str | None = None

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def version(self) -> str:
        return self.server.version

    @property
    def deprecated(self) -> bool:
        return self.status != "active"

    @property
    def repository_url(self) -> str | None:
        url = (self.server.repository or {}).get("url")
        return _bounded(url) if isinstance(url, str) else None

    def public(
        self, which: Which = shutil.which, servers_dir: Path | None = None
    ) -> dict[str, Any]:
        """What a person or the model is shown: never more than the registry said."""
        try:
            plan = plan_install(self, which=which, servers_dir=servers_dir)
            runs, needs = plan.how, [s.public() for s in plan.settings if s.required]
        except RegistryEntryError as exc:
            runs, needs = f"cannot run here: {exc}", []
        return {
            "name": self.name,
            "title": self.server.title,
            "description": self.server.description,
            "version": self.version,
            "status": self.status,
            "repository": self.repository_url,
            "runs": runs,
            "required_settings": needs,
        }


def read_entry(item: Any) -> RegistryServer | None:
    """An entry of a listing (``{"server": {...}, "_meta": {...}}``, or an older registry's
    flat ``{...server..., "_meta": {...}}``); None for one that is not a server.json."""
    if not isinstance(item, dict):
        return None
    inner = item.get("server")
    body: dict[str, Any] = inner if isinstance(inner, dict) else item
    meta_all = item.get("_meta") if isinstance(item.get("_meta"), dict) else body.get("_meta")
    meta = meta_all.get(OFFICIAL_META) if isinstance(meta_all, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    try:
        server = ServerJSON.model_validate(body)
    except ValidationError:
        return None
    status = meta.get("status") or server.status or "active"
    latest = meta.get("isLatest")
    published = meta.get("publishedAt")
    return RegistryServer(
        server,
        status=str(_bounded(status, 40)).lower(),
        is_latest=latest if isinstance(latest, bool) else True,
        published_at=_bounded(published, 40) if isinstance(published, str) else None,
    )


@dataclass(frozen=True)
class Answer:
    """What the registry (or the cache standing in for it) answered."""

    servers: list[RegistryServer]
    next_cursor: str | None
    fetched_at: datetime
    from_cache: bool = False
    offline: str | None = None  # why the registry was not asked or could not answer

    def public(
        self, which: Which = shutil.which, servers_dir: Path | None = None
    ) -> dict[str, Any]:
        shown: dict[str, Any] = {"servers": [s.public(which, servers_dir) for s in self.servers]}
        if self.next_cursor:
            shown["next_cursor"] = self.next_cursor
        if self.offline:
            shown["offline"] = self.offline
        return shown


# -- the client, and its cache ------------------------------------------------------------------


class RegistryClient:
    """Asks one registry; every answer goes through the cache under ``cache_dir``."""

    def __init__(
        self,
        settings: RegistrySettings,
        cache_dir: Path,
        clock: Clock,
        servers_dir: Path | None = None,
    ) -> None:
        self.url = settings.url
        self.servers_dir = servers_dir  # where PyPI servers get a virtual environment
        self.ttl = timedelta(seconds=settings.cache_ttl)
        self.timeout = settings.timeout
        self.cache_dir = cache_dir
        self._clock = clock

    async def search(self, query: str, *, limit: int = 10, cursor: str | None = None) -> Answer:
        """Servers whose name holds ``query`` (the registry decides how it matches), the
        latest version of each, active ones first."""
        params = {"search": query.strip(), "limit": str(max(1, min(limit, SEARCH_LIMIT)))}
        params["version"] = "latest"
        if cursor:
            params["cursor"] = cursor
        try:
            body, fetched_at, offline, cached = await self._get("servers", params)
        except RegistryNotFound:
            raise RegistryError(
                f"{self.url} does not answer as an MCP Registry (no /v0.1/servers, no "
                "/v0/servers); check registry.url in settings.json"
            ) from None
        servers = [s for s in map(read_entry, _listed(body)) if s is not None][:MAX_SERVERS]
        servers.sort(key=lambda s: s.deprecated)  # stable: the registry's order otherwise
        metadata = body.get("metadata") if isinstance(body, dict) else None
        next_cursor = metadata.get("nextCursor") if isinstance(metadata, dict) else None
        return Answer(
            servers[:limit],
            _bounded(next_cursor) if isinstance(next_cursor, str) and next_cursor else None,
            fetched_at,
            cached,
            offline,
        )

    async def server(self, name: str, version: str | None = None) -> RegistryServer:
        """One server by its registry name, at ``version`` (default: the latest)."""
        path = f"servers/{quote(name, safe='')}/versions/{quote(version or 'latest', safe='')}"
        try:
            body, _at, _offline, _cached = await self._get(path, {})
        except RegistryNotFound:
            raise RegistryEntryError(self._not_found(name, version)) from None
        found = read_entry(body)
        if found is None or found.name != name:
            raise RegistryEntryError(self._not_found(name, version))
        return found

    def _not_found(self, name: str, version: str | None) -> str:
        at = f" at version {version}" if version else ""
        return f"the registry {self.url} has no server {name}{at} (diana servers search finds one)"

    async def _get(
        self, path: str, params: dict[str, str]
    ) -> tuple[Any, datetime, str | None, bool]:
        """The JSON answer to ``path`` (fresh from the cache, else from the registry, else
        from the cache however old, saying why): (body, fetched at, offline reason, cached)."""
        key = self._key(path, params)
        kept = self._cached(key)
        now = self._clock.now()
        if kept is not None and now - kept[1] < self.ttl:
            return kept[0], kept[1], None, True
        try:
            body = await self._fetch(path, params)
        except RegistryUnreachable as exc:
            if kept is None:
                raise RegistryError(f"{exc}; nothing is cached for it") from None
            return kept[0], kept[1], f"{exc}: answered from the cache", True
        self._keep(key, body, now)
        return body, now, None, False

    async def _fetch(self, path: str, params: dict[str, str]) -> Any:
        import httpx

        try:
            async with httpx.AsyncClient(
                timeout=self.timeout, follow_redirects=True, verify=_tls()
            ) as client:
                for api in ("v0.1", "v0"):
                    answer = await self._ask(client, f"{self.url}/{api}/{path}", params)
                    if answer is not None:
                        return answer
        except (httpx.TransportError, OSError) as exc:
            raise RegistryUnreachable(f"the registry {self.url} is not reachable ({exc})") from None
        raise RegistryNotFound(path)

    async def _ask(self, client: Any, url: str, params: dict[str, str]) -> Any:
        """The JSON at ``url``; None when it is not there (404: an older API, or no such
        server)."""
        async with client.stream("GET", url, params=params) as response:
            if response.status_code == 404:
                return None
            if response.status_code >= 500:
                raise RegistryUnreachable(
                    f"the registry {self.url} answered HTTP {response.status_code}"
                )
            if response.status_code != 200:
                raise RegistryError(
                    f"the registry {self.url} refused the request: HTTP {response.status_code}"
                )
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise RegistryError(
                        f"the registry {self.url} answered more than "
                        f"{MAX_RESPONSE_BYTES // (1024 * 1024)} MiB; nothing of it was used"
                    )
        try:
            return parse_json(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, JSONProblem) as exc:
            raise RegistryError(
                f"the registry {self.url} answered something not JSON: {exc}"
            ) from None

    def _key(self, path: str, params: dict[str, str]) -> str:
        asked = json.dumps([self.url, path, sorted(params.items())])
        return hashlib.sha256(asked.encode()).hexdigest()[:32]

    def _cached(self, key: str) -> tuple[Any, datetime] | None:
        try:
            kept = json.loads((self.cache_dir / f"{key}.json").read_text("utf-8"))
            return kept["body"], datetime.fromisoformat(kept["fetched_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: asked anew

    def _keep(self, key: str, body: Any, now: datetime) -> None:
        try:
            write_private(
                self.cache_dir / f"{key}.json",
                json.dumps({"fetched_at": now.isoformat(), "body": body}),
                durable=False,
            )
        except OSError:
            pass  # the cache is an aid: the answer is used all the same


@functools.cache
def _tls() -> Any:
    """One TLS context for every request: making one reads the system's certificates, which
    takes longer than asking a nearby registry."""
    import ssl

    return ssl.create_default_context()


class RegistryUnreachable(Exception):
    """The registry could not be asked (network, time-out, its own failure)."""


class RegistryNotFound(Exception):
    """Neither API version has what was asked for."""


def _listed(body: Any) -> list[Any]:
    servers = body.get("servers") if isinstance(body, dict) else None
    return servers[:MAX_SERVERS] if isinstance(servers, list) else []


# -- from an entry to an mcp-servers.json entry ------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """A value the entry needs from a person (or has a default for)."""

    name: str
    kind: Literal["env", "header", "argument"]
    description: str
    secret: bool
    required: bool
    default: str | None = None
    choices: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"name": self.name, "kind": self.kind, "secret": self.secret}
        if self.description:
            shown["description"] = self.description
        if self.default is not None and not self.secret:
            shown["default"] = self.default
        if self.choices:
            shown["choices"] = list(self.choices)
        return shown


@dataclass
class InstallPlan:
    """How an entry runs here: the config entry (completed by ``entry``) and its settings."""

    registry_name: str
    version: str
    server_name: str  # the name suggested for mcp-servers.json
    how: str  # e.g. "npm via npx -y pkg@1.0.0"
    settings: list[Setting]
    _build: Callable[[Mapping[str, str]], dict[str, Any]] = field(repr=False)
    # What must be done before the entry can run (a virtual environment made); None: nothing.
    prepare: VenvInstall | None = None

    def missing(self, values: Mapping[str, str]) -> list[Setting]:
        """The required settings neither given nor defaulted."""
        return [
            s for s in self.settings if s.required and s.default is None and s.name not in values
        ]

    def entry(self, values: Mapping[str, str]) -> dict[str, Any]:
        """The mcp-servers.json entry with these values; RegistryEntryError naming a required
        setting that is missing, or a value given for no setting of this entry."""
        unknown = sorted(set(values) - {s.name for s in self.settings})
        if unknown:
            names = ", ".join(s.name for s in self.settings) or "none"
            raise RegistryEntryError(
                f"{self.registry_name} takes no setting {unknown[0]} (its settings: {names})"
            )
        missing = self.missing(values)
        if missing:
            raise RegistryEntryError(
                f"{self.registry_name} needs {', '.join(s.name for s in missing)}"
            )
        return self._build(values)


def suggested_name(registry_name: str) -> str:
    """``io.github.user/weather-server`` → ``weather-server``: the part a person would say."""
    last = registry_name.rsplit("/", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", last).strip("-._")
    return (name or "server")[:64]


def plan_install(
    entry: RegistryServer,
    *,
    which: Which = shutil.which,
    installed: Callable[[str, str], str | None] | None = None,
    servers_dir: Path | None = None,
) -> InstallPlan:
    """The first of the entry's packages this machine can run, else its first remote.
    ``servers_dir``: where a PyPI package no other way runs gets a virtual environment of
    its own (None: nowhere). RegistryEntryError saying why none can."""
    installed = installed or installed_program
    reasons: list[str] = []
    for package in entry.server.packages:
        try:
            return _package_plan(entry, package, which, installed, servers_dir)
        except RegistryEntryError as exc:
            reasons.append(str(exc))
    for remote in entry.server.remotes:
        try:
            return _remote_plan(entry, remote)
        except RegistryEntryError as exc:
            reasons.append(str(exc))
    if not reasons:
        raise RegistryEntryError("it lists no package and no remote")
    raise RegistryEntryError("; ".join(reasons))


def _settings_of(inputs: list[Input], kind: Literal["env", "header", "argument"]) -> list[Setting]:
    found = []
    for given in inputs:
        if given.value is not None and "{" not in given.value:
            continue  # fixed by the entry itself
        if kind == "argument" and given.type == "named" and not given.is_required:
            if given.default is None:
                continue  # an optional flag: left out
        found.append(
            Setting(
                name=given.label,
                kind=kind,
                description=given.description or "",
                secret=given.is_secret,
                required=given.is_required or (kind == "argument" and given.type != "named"),
                default=given.default,
                choices=tuple(given.choices),
            )
        )
    return found


def _arguments(inputs: list[Input], values: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for given in inputs:
        value = values.get(given.label, given.value if given.value is not None else given.default)
        if given.type == "named":
            if given.name is None:
                continue
            if value is None:
                if given.is_required:
                    out.append(given.name)
                continue
            out += [given.name, value]
        elif value is not None:
            out.append(value)
    return out


def _pairs(inputs: list[Input], values: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for given in inputs:
        if given.name is None:
            continue
        value = values.get(given.name, given.value if given.value is not None else given.default)
        if value is not None:
            out[given.name] = value
    return out


def _package_plan(
    entry: RegistryServer,
    package: Package,
    which: Which,
    installed: Callable[[str, str], str | None],
    servers_dir: Path | None = None,
) -> InstallPlan:
    kind = package.registry_type.lower()
    version = package.version or entry.version
    if not version or version == "latest":
        raise RegistryEntryError(f"{kind} package {package.identifier} names no version to pin")
    if package.transport.type != "stdio":
        raise RegistryEntryError(
            f"{kind} package {package.identifier} runs as a local {package.transport.type} "
            "server, which diana does not start"
        )
    ident = package.identifier
    # Each runner: its program, what comes before the runtime arguments, and after them.
    before: list[str]
    after: list[str]
    prepare: VenvInstall | None = None
    if kind == "npm":
        if which("npx") is None:
            raise RegistryEntryError(f"npm package {ident} needs npx (Node.js), not found")
        command, before, after = "npx", ["-y"], [f"{ident}@{version}"]
        how = f"npm via npx -y {ident}@{version}"
    elif kind == "pypi":
        program = installed(ident, version)
        if which("uvx") is not None:
            command, before, after = "uvx", [], [f"{ident}=={version}"]
            how = f"pypi via uvx {ident}=={version}"
        elif which("pipx") is not None:
            command, before, after = "pipx", ["run"], ["--spec", f"{ident}=={version}", ident]
            how = f"pypi via pipx run --spec {ident}=={version} {ident}"
        elif program is not None:
            command, before, after = program, [], []
            how = f"pypi {ident}=={version}, installed beside diana"
        elif servers_dir is not None:
            home = servers_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', ident)}-{version}"
            prepare = VenvInstall(home, f"{ident}=={version}", ident)
            # The program's name is known once installed: the prepared path replaces this.
            command, before, after = str(home / "bin" / ident), [], []
            how = f"pypi {ident}=={version} in a virtual environment of its own ({home})"
        else:
            raise RegistryEntryError(
                f"pypi package {ident} needs uvx or pipx (neither found), or {ident}=={version} "
                "installed beside diana"
            )
    elif kind == "oci":
        engine = which("docker") or which("podman")
        if engine is None:
            raise RegistryEntryError(f"oci image {ident} needs docker or podman, not found")
        image = ident if re.search(r":[^/]+$|@sha256:", ident) else f"{ident}:{version}"
        # The container sees only the variables passed on: each by name, its value from
        # the environment diana gives the engine (the entry's env).
        forwarded = [
            arg for var in package.environment_variables if var.name for arg in ("-e", var.name)
        ]
        command = Path(engine).name
        before, after = ["run", "-i", "--rm", *forwarded], [image]
        how = f"oci via {command} run {image}"
    else:
        raise RegistryEntryError(f"{kind} packages ({ident}) are not run by diana")

    def build(values: Mapping[str, str]) -> dict[str, Any]:
        args = [*before, *_arguments(package.runtime_arguments, values), *after]
        args += _arguments(package.package_arguments, values)
        return _stdio_entry(command, args, _pairs(package.environment_variables, values))

    return InstallPlan(
        entry.name,
        version,
        suggested_name(entry.name),
        how,
        _package_settings(package),
        build,
        prepare,
    )


def _package_settings(package: Package) -> list[Setting]:
    return [
        *_settings_of(package.environment_variables, "env"),
        *_settings_of(package.runtime_arguments, "argument"),
        *_settings_of(package.package_arguments, "argument"),
    ]


def _stdio_entry(command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": command, "args": args}
    if env:
        entry["env"] = env
    return entry


def _remote_plan(entry: RegistryServer, remote: Remote) -> InstallPlan:
    kind = remote.type.lower()
    if kind not in ("streamable-http", "sse"):
        raise RegistryEntryError(f"remote of type {kind} is not one diana speaks")
    url = remote.url or ""
    if not re.match(r"^https?://", url):
        raise RegistryEntryError(f"remote URL {url!r} is not http:// or https://")
    if "{" in url:
        raise RegistryEntryError(f"remote URL {url} is a template diana does not fill in")

    def build(values: Mapping[str, str]) -> dict[str, Any]:
        built: dict[str, Any] = {"url": url, "transport": kind}
        headers = _pairs(remote.headers, values)
        if headers:
            built["headers"] = headers
        return built

    return InstallPlan(
        entry.name,
        entry.version or "remote",
        suggested_name(entry.name),
        f"remote {kind} at {url}",
        _settings_of(remote.headers, "header"),
        build,
    )


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
    from .. import processes

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


# -- candidates for what a request needed ------------------------------------------------------

STOPWORDS = frozenset(
    {"api", "tool", "tools", "data", "the", "a", "an", "of", "and", "to", "mcp", "server"}
)


def capability_words(capability: str) -> list[str]:
    """The words of a capability's name worth searching for (``financial_data_api`` →
    ``financial``), most telling first; all of them when every one is a stopword."""
    words = [w for w in re.split(r"[^a-z0-9]+", capability.lower()) if len(w) > 1]
    kept = [w for w in words if w not in STOPWORDS]
    return kept or words


def relevance(server: RegistryServer, words: list[str]) -> float:
    """How well an entry matches the words: in its name counts most, then title, then
    description; deprecated entries are never candidates."""
    if server.deprecated:
        return 0.0
    name = server.name.lower()
    title = (server.server.title or "").lower()
    description = server.server.description.lower()
    score = 0.0
    for word in words:
        score += 3.0 * (word in name) + 2.0 * (word in title) + 1.0 * (word in description)
    return score


async def candidates(
    client: RegistryClient, capability: str, *, limit: int = 3
) -> list[RegistryServer]:
    """The registry's best ``limit`` entries for a missing capability, searched by its
    words (each word on its own: a registry matches names by substring)."""
    words = capability_words(capability)
    found: dict[str, RegistryServer] = {}
    answers = await asyncio.gather(
        *(client.search(word, limit=10) for word in words[:4]), return_exceptions=True
    )
    for answer in answers:
        if isinstance(answer, Answer):
            for server in answer.servers:
                found.setdefault(server.name, server)
    ranked = sorted(
        (s for s in found.values() if relevance(s, words) > 0),
        key=lambda s: (-relevance(s, words), s.name),
    )
    return ranked[:limit]
