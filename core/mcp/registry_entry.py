"""A registry entry (``server.json``) and the mcp-servers.json entry that runs it.

The entry is read leniently and bounded (its size, the number of packages, remotes, arguments
and variables, and every text in it): what a registry answers is data from outside, and
nothing in it is followed as an instruction. ``read_entry`` makes a ``RegistryServer`` of one
item of an answer; ``Answer`` is a page of them as a search found them.

``plan_install`` turns an entry into an mcp-servers.json entry pinned to its version, run the
way this machine can: an npm package with ``npx -y pkg@version``, a PyPI package with ``uvx
pkg==version``, else ``pipx run``, else the package's own program when that very version is
installed beside diana (or a virtual environment made for it: core/mcp/venv_install.py); an
OCI image with docker or podman; a remote by its URL. What the entry needs from a person
(required environment variables, headers, arguments) is listed as settings, secrets marked.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..text import cut_text, printable
from .venv_install import RegistryEntryError, VenvInstall, installed_program

MAX_PACKAGES = 16  # packages, remotes, arguments, variables kept per entry
MAX_TEXT = 1000  # characters kept of a description
MAX_FIELD = 300  # characters kept of a name, identifier, version, URL
OFFICIAL_META = "io.modelcontextprotocol.registry/official"

Which = Callable[[str], str | None]


def bounded(value: Any, limit: int = MAX_FIELD) -> Any:
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
        return bounded(value)

    @field_validator("description", mode="before")
    @classmethod
    def _long(cls, value: Any) -> Any:
        return bounded(value, MAX_TEXT)

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
        return bounded(value)

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
        return bounded(value)

    @field_validator("description", mode="before")
    @classmethod
    def _long(cls, value: Any) -> Any:
        return bounded(value, MAX_TEXT) if value is not None else ""

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
        return bounded(url) if isinstance(url, str) else None

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
        status=str(bounded(status, 40)).lower(),
        is_latest=latest if isinstance(latest, bool) else True,
        published_at=bounded(published, 40) if isinstance(published, str) else None,
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
