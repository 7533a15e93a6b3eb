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

import ipaddress
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..content.text import cut_text, printable
from ..system.telemetry import is_secret_name
from ..web.addresses import (
    HOW_TO_ALLOW,
    AddressRule,
    Refused,
    Resolver,
    parse_url,
    system_resolver,
    why_not_public,
)
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
        self,
        which: Which = shutil.which,
        servers_dir: Path | None = None,
        rule: AddressRule | None = None,
    ) -> dict[str, Any]:
        """What a person or the model is shown: never more than the registry said."""
        try:
            plan = plan_install(self, which=which, servers_dir=servers_dir, rule=rule)
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
        self,
        which: Which = shutil.which,
        servers_dir: Path | None = None,
        rule: AddressRule | None = None,
    ) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "servers": [s.public(which, servers_dir, rule) for s in self.servers]
        }
        if self.next_cursor:
            shown["next_cursor"] = self.next_cursor
        if self.offline:
            shown["offline"] = self.offline
        return shown


# -- the client, and its cache ------------------------------------------------------------------


# -- what an entry may name: each registry type's own grammar ------------------------------------

# npm: lowercase, optionally scoped; never starting with "-", "." or "_" (an option, a hidden
# or a reserved name).
_NPM_NAME = re.compile(r"^(?:@[a-z0-9~][a-z0-9._~-]*/)?[a-z0-9~][a-z0-9._~-]*$")
# npm versions diana pins: exact semver.
_SEMVER = re.compile(
    r"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
# PyPI: PEP 508 project names, PEP 440 versions (public, with an optional local part).
_PYPI_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PEP440 = re.compile(
    r"^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?"
    r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
    r"(?:[-_.]?dev[-_.]?[0-9]*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$",
    re.IGNORECASE,
)
# OCI image references (the distribution spec's grammar): [host[:port]/]path[:tag][@digest].
_OCI_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_OCI_HOST = rf"{_OCI_LABEL}(?:\.{_OCI_LABEL})*(?::[0-9]+)?"
_OCI_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_OCI_IMAGE = re.compile(
    rf"^(?:{_OCI_HOST}/)?{_OCI_PART}(?:/{_OCI_PART})*(?::{_OCI_TAG})?(?:@sha256:[a-f0-9]{{64}})?$"
)
_OCI_VERSION = re.compile(rf"^{_OCI_TAG}$")
# NuGet package ids.
_NUGET_ID = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_NAMES = {"npm": _NPM_NAME, "pypi": _PYPI_NAME, "oci": _OCI_IMAGE, "nuget": _NUGET_ID}
_VERSIONS = {"npm": _SEMVER, "pypi": _PEP440, "oci": _OCI_VERSION, "nuget": _SEMVER}
_GRAMMAR = {
    "npm": "an npm package name",
    "pypi": "a PyPI project name (PEP 508)",
    "oci": "an OCI image reference",
    "nuget": "a NuGet package id",
}
_VERSION_GRAMMAR = {
    "npm": "an exact npm version (semver)",
    "pypi": "a PEP 440 version",
    "oci": "an image tag",
    "nuget": "a NuGet version",
}

# Environment an entry may never set: what decides which program runs or what it loads
# before the server's own code (loaders, interpreters, shells, package managers, PATH).
_DANGEROUS_ENV = re.compile(
    r"^(?:PATH|LD_\w*|DYLD_\w*|BASH_ENV|ENV|SHELL|SHELLOPTS|BASHOPTS|IFS|PS4|PROMPT_COMMAND|"
    r"NODE_OPTIONS|NODE_PATH|NODE_EXTRA_CA_CERTS|NPM_CONFIG_\w*|NPX_\w*|YARN_\w*|COREPACK_\w*|"
    r"PYTHON\w*|PIP_\w*|PIPX_\w*|UV_\w*|VIRTUAL_ENV|CONDA_\w*|PERL5OPT|PERL5LIB|PERLLIB|"
    r"RUBYOPT|RUBYLIB|GEM_\w*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|CLASSPATH|"
    r"DOCKER_\w*|CONTAINERS_\w*|GIT_\w*|HOME|XDG_CONFIG_HOME|SSL_CERT_\w*|REQUESTS_CA_BUNDLE|"
    r"CURL_CA_BUNDLE|HTTPS?_PROXY|ALL_PROXY|NO_PROXY|GCONV_PATH|MALLOC_\w*|TMPDIR)$",
    re.IGNORECASE,
)

# Runner options an entry may never pass: what changes where a package comes from, what
# else is installed with it, or what a container may reach on this machine.
_DANGEROUS_RUNTIME = {
    "npm": re.compile(
        r"^(?:--(?:registry|userconfig|globalconfig|prefix|cache|package|call|node-options|"
        r"script-shell|shell|workspace|workspaces|include-workspace-root|@[^=]*:registry)"
        r")(?:=.*)?$|^-[pc]"
    ),
    "pypi": re.compile(
        r"^(?:--(?:with|with-editable|with-requirements|from|index|index-url|extra-index-url|"
        r"default-index|find-links|python|spec|pip-args|editable|config-file|directory|project)"
        r")(?:=.*)?$|^-[eifpw]"
    ),
    "oci": re.compile(
        r"^(?:--(?:volume|volumes-from|mount|privileged|cap-add|device|device-cgroup-rule|"
        r"security-opt|network|net|pid|ipc|uts|userns|cgroupns|user|group-add|env-file|"
        r"add-host|dns|entrypoint|workdir|runtime|gpus|tmpfs|sysctl|label-file)"
        r")(?:=.*)?$|^-[veuw]"
    ),
}


def dangerous_env_name(name: str) -> bool:
    """Whether an entry's environment variable of this name could change which program runs
    or what it loads: never taken from a registry entry."""
    return bool(_DANGEROUS_ENV.match(name))


def check_package(kind: str, identifier: str, version: str) -> None:
    """RegistryEntryError unless the identifier and version are what the registry type's own
    grammar allows (nothing an option, a path or a second requirement)."""
    grammar = _NAMES.get(kind)
    if grammar is not None and not grammar.match(identifier):
        raise RegistryEntryError(
            f"{kind} package identifier {identifier!r} is not {_GRAMMAR[kind]}; not installed"
        )
    versions = _VERSIONS.get(kind)
    if versions is not None and not versions.match(version):
        raise RegistryEntryError(
            f"{kind} package {identifier} version {version!r} is not {_VERSION_GRAMMAR[kind]}; "
            "not installed"
        )


def _check_inputs(kind: str, package: Package) -> None:
    """Refuse the entry's environment variables and runner options that no entry may choose."""
    for var in package.environment_variables:
        if var.name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var.name):
            raise RegistryEntryError(
                f"{kind} package {package.identifier} names an environment variable "
                f"{var.name!r}, which is not a variable name"
            )
        if var.name is not None and dangerous_env_name(var.name):
            raise RegistryEntryError(
                f"{kind} package {package.identifier} sets the environment variable {var.name}, "
                "which decides what program runs or what it loads; diana takes it from no "
                "registry entry"
            )
    refused = _DANGEROUS_RUNTIME.get(kind)
    for given in package.runtime_arguments:
        for text in (given.name, given.value, given.default):
            if refused is not None and text is not None and refused.match(text.strip()):
                raise RegistryEntryError(
                    f"{kind} package {package.identifier} asks for the runtime option "
                    f"{text.strip()!r}, which diana takes from no registry entry"
                )


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

    def shown(self, values: Mapping[str, str]) -> dict[str, Any]:
        """The exact plan a person approves: what runs (program, arguments, environment
        variable names, the values the entry fixed itself), or the URL and header names; a
        secret's value is never in it. Raises as ``entry`` does."""
        built = self.entry(values)
        secret = set(built.get("secrets", []))
        plan: dict[str, Any] = {
            "registry_name": self.registry_name,
            "version": self.version,
            "runs": self.how,
        }
        if "command" in built:
            plan["command"] = built["command"]
            plan["args"] = [
                "<secret>" if f"args[{i}]" in secret else arg for i, arg in enumerate(built["args"])
            ]
            if self.prepare is not None:
                plan["installs"] = (
                    f"pip install {self.prepare.requirement} into {self.prepare.directory}"
                )
        else:
            plan["url"] = built["url"]
            plan["transport"] = built["transport"]
        for key in ("env", "headers"):
            pairs = built.get(key) or {}
            if pairs:
                plan[key] = {
                    name: "<secret>" if name in secret or is_secret_name(name) else value
                    for name, value in sorted(pairs.items())
                }
        return plan

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
    rule: AddressRule | None = None,
) -> InstallPlan:
    """The first of the entry's packages this machine can run, else its first remote.
    ``servers_dir``: where a PyPI package no other way runs gets a virtual environment of
    its own (None: nowhere). ``rule``: where a remote may point (web_fetch's address rule;
    by default public addresses only). RegistryEntryError saying why none can."""
    installed = installed or installed_program
    reasons: list[str] = []
    for package in entry.server.packages:
        try:
            return _package_plan(entry, package, which, installed, servers_dir)
        except RegistryEntryError as exc:
            reasons.append(str(exc))
    for remote in entry.server.remotes:
        try:
            return _remote_plan(entry, remote, rule or AddressRule())
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


def _arguments(
    inputs: list[Input], values: Mapping[str, str], secret: list[int], start: int
) -> list[str]:
    """The arguments; the index (counted from ``start``) of each secret value is added to
    ``secret``."""
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
        else:
            continue
        if given.is_secret:
            secret.append(start + len(out) - 1)
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
    check_package(kind, ident, version)
    _check_inputs(kind, package)
    # Each runner: its program, what comes before the runtime arguments, and after them.
    before: list[str]
    after: list[str]
    prepare: VenvInstall | None = None
    # A runner is written as the absolute path diana's own PATH finds: the program the person
    # approved is the one that runs, whatever PATH the server's environment or a later shell
    # has; if it moves, the server fails to start, loudly, rather than another one running.
    if kind == "npm":
        npx = which("npx")
        if npx is None:
            raise RegistryEntryError(f"npm package {ident} needs npx (Node.js), not found")
        # "--": what follows is the package and its own arguments, never an option of npx.
        command, before, after = npx, ["-y"], ["--", f"{ident}@{version}"]
        how = f"npm via npx -y -- {ident}@{version}"
    elif kind == "pypi":
        program = installed(ident, version)
        uvx, pipx = which("uvx"), which("pipx")
        if uvx is not None:
            command, before, after = uvx, [], [f"{ident}=={version}"]
            how = f"pypi via uvx {ident}=={version}"
        elif pipx is not None:
            command, before, after = pipx, ["run"], ["--spec", f"{ident}=={version}", ident]
            how = f"pypi via pipx run --spec {ident}=={version} {ident}"
        elif program is not None:
            command, before, after = program, [], []
            how = f"pypi {ident}=={version}, installed beside diana"
        elif servers_dir is not None:
            home = _inside(servers_dir, f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', ident)}-{version}")
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
        command = engine
        before, after = ["run", "-i", "--rm", *forwarded], [image]
        how = f"oci via {Path(engine).name} run {image}"
    else:
        raise RegistryEntryError(f"{kind} packages ({ident}) are not run by diana")

    def build(values: Mapping[str, str]) -> dict[str, Any]:
        secret: list[int] = []
        args = [*before, *_arguments(package.runtime_arguments, values, secret, len(before))]
        args += after
        args += _arguments(package.package_arguments, values, secret, len(args))
        built = _stdio_entry(command, args, _pairs(package.environment_variables, values))
        marked = [f"args[{i}]" for i in secret]
        marked += [v.name for v in package.environment_variables if v.is_secret and v.name]
        if marked:
            built["secrets"] = [
                m for m in marked if m.startswith("args[") or m in built.get("env", {})
            ]
            if not built["secrets"]:
                del built["secrets"]
        return built

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


def _inside(directory: Path, name: str) -> Path:
    """``directory / name``, refused unless it stays inside ``directory``."""
    home = (directory / name).resolve()
    if name in ("", ".", "..") or not home.is_relative_to(directory.resolve()):
        raise RegistryEntryError(f"{name!r} would be outside {directory}; not installed")
    return home


def _stdio_entry(command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": command, "args": args}
    if env:
        entry["env"] = env
    return entry


def _literal_kind(host: str) -> str | None:
    """What kind of non-public address a host written as an address (or as localhost) is;
    None for a public one or a name (a name is resolved and checked by ``check_remote``)."""
    if host == "localhost" or host.endswith(".localhost"):
        return "a loopback address"
    try:
        return why_not_public(ipaddress.ip_address(host))
    except ValueError:
        return None


def _remote_plan(entry: RegistryServer, remote: Remote, rule: AddressRule) -> InstallPlan:
    kind = remote.type.lower()
    if kind not in ("streamable-http", "sse"):
        raise RegistryEntryError(f"remote of type {kind} is not one diana speaks")
    url = remote.url or ""
    if not re.match(r"^https?://", url):
        raise RegistryEntryError(f"remote URL {url!r} is not http:// or https://")
    if "{" in url:
        raise RegistryEntryError(f"remote URL {url} is a template diana does not fill in")
    try:
        _, host, port = parse_url(url)
    except Refused as exc:
        said = str(exc).replace("web_fetch", "diana")
        raise RegistryEntryError(f"remote URL: {said}") from None
    kind_of_address = _literal_kind(host)
    if kind_of_address is not None and not rule.host_allowed(host, port):
        raise RegistryEntryError(
            f"remote URL {url}: diana installs no remote at {kind_of_address} ({host}); "
            f"{HOW_TO_ALLOW}"
        )

    def build(values: Mapping[str, str]) -> dict[str, Any]:
        built: dict[str, Any] = {"url": url, "transport": kind}
        headers = _pairs(remote.headers, values)
        if headers:
            built["headers"] = headers
            marked = [h.name for h in remote.headers if h.is_secret and h.name in headers]
            if marked:
                built["secrets"] = marked
        return built

    return InstallPlan(
        entry.name,
        entry.version or "remote",
        suggested_name(entry.name),
        f"remote {kind} at {url}",
        _settings_of(remote.headers, "header"),
        build,
    )


async def check_remote(
    plan: InstallPlan,
    values: Mapping[str, str],
    rule: AddressRule,
    resolve: Resolver = system_resolver,
) -> None:
    """A remote entry's URL must pass web_fetch's address rule (no loopback, private or
    link-local address unless web.allow_private or web.allow_hosts says so): an entry is
    outside input, and an approval must not make diana send its headers to this machine's or
    its network's own services. RegistryEntryError naming the rule."""
    url = plan.entry(values).get("url")
    if url is None:
        return
    try:
        await rule.target(url, resolve)
    except Refused as exc:
        said = str(exc).replace("web_fetch does not reach", "diana installs no remote at")
        raise RegistryEntryError(f"remote URL {url}: {said}") from None


def plan_lines(shown: Mapping[str, Any]) -> list[str]:
    """An install plan (``InstallPlan.shown``) as the lines a person reads before it runs."""
    lines = []
    if "command" in shown:
        lines.append("runs: " + shlex.join([shown["command"], *shown.get("args", [])]))
    if "installs" in shown:
        lines.append(f"installs: {shown['installs']}")
    if "url" in shown:
        lines.append(f"connects to: {shown['url']} ({shown.get('transport', '')})")
    for key, said in (("env", "environment"), ("headers", "headers")):
        if shown.get(key):
            lines.append(f"{said}: " + ", ".join(f"{k}={v}" for k, v in shown[key].items()))
    return lines
