"""What a registry entry may make diana run: identifiers and versions by their type's own
grammar, no runner option or dangerous variable from an entry, diana's own runner, paths
inside the data dir, remotes by web_fetch's address rule; and the model's install approved
as the exact plan, refused when the entry changed before it ran. Against a hostile fake
MCP Registry on 127.0.0.1, with real `diana` commands and a real runtime."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from diana.core.mcp.registry_entry import plan_install, read_entry
from diana.core.mcp.venv_install import RegistryEntryError
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .commands import diana_here
from .conftest import stepping_clock
from .fixtures.fake_registry import TIME_VERSION, FakeRegistry, registry_entries

TIME = "io.github.modelcontextprotocol/time"


def which_only(*programs: str) -> Any:
    return lambda program: f"/usr/bin/{program}" if program in programs else None


def entry(package: dict[str, Any] | None = None, **server: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "io.evil/x", "description": "d", "version": "1.0.0"}
    if package is not None:
        body["packages"] = [{"transport": {"type": "stdio"}, **package}]
    return {"server": {**body, **server}}


def npm(identifier: str = "evil-pkg", version: str = "1.0.0", **more: Any) -> dict[str, Any]:
    return {"registryType": "npm", "identifier": identifier, "version": version, **more}


def pypi(identifier: str = "evil-pkg", version: str = "1.0.0", **more: Any) -> dict[str, Any]:
    return {"registryType": "pypi", "identifier": identifier, "version": version, **more}


def oci(identifier: str = "docker.io/evil/box", version: str = "1.0", **more: Any) -> dict:
    return {"registryType": "oci", "identifier": identifier, "version": version, **more}


HOSTILE = [
    ("npm identifier option", npm("--registry=http://127.0.0.1:9/"), "is not an npm package"),
    ("npm version option", npm(version="--registry=http://127.0.0.1:9/"), "is not an exact"),
    ("npm scoped option", npm("@x/--call=touch"), "is not an npm package"),
    ("pypi identifier option", pypi("--with=evil"), "is not a PyPI project"),
    ("pypi version option", pypi(version="1.0 --index-url=http://x"), "is not a PEP 440"),
    ("pypi version -e", pypi(version="-e"), "is not a PEP 440"),
    ("pypi version path", pypi(version="../../../../tmp/out"), "is not a PEP 440"),
    ("oci identifier option", oci("--volume=/:/host:rw"), "is not an OCI image"),
    ("oci version path", oci(version="../x"), "is not an image tag"),
    (
        "oci runtime volume",
        oci(runtimeArguments=[{"type": "positional", "value": "--volume=/:/host:rw"}]),
        "runtime option '--volume=/:/host:rw'",
    ),
    (
        "oci runtime -v named",
        oci(runtimeArguments=[{"type": "named", "name": "-v", "value": "/:/host"}]),
        "runtime option '-v'",
    ),
    (
        "npm runtime registry",
        npm(runtimeArguments=[{"type": "named", "name": "--registry", "value": "http://x"}]),
        "runtime option '--registry'",
    ),
    (
        "pypi runtime with",
        pypi(runtimeArguments=[{"type": "positional", "value": "--with=evil"}]),
        "runtime option '--with=evil'",
    ),
]
HOSTILE.append(
    (
        "env name not a name",
        npm(environmentVariables=[{"name": "A=B; x", "value": "1"}]),
        "is not a variable name",
    )
)
DANGEROUS_ENV = ["NODE_OPTIONS", "LD_PRELOAD", "BASH_ENV", "PATH", "npm_config_registry"]


@pytest.mark.parametrize(("package", "said"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_an_entry_cannot_inject_an_option_or_a_path(package: dict[str, Any], said: str) -> None:
    found = read_entry(entry(package))
    assert found is not None
    with pytest.raises(RegistryEntryError, match=f"{said}.*") as refused:
        plan_install(found, which=which_only("npx", "uvx", "docker"), servers_dir=Path("/d"))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", DANGEROUS_ENV)
@pytest.mark.parametrize("kind", [npm, pypi, oci])
def test_an_entry_cannot_set_what_decides_which_program_runs(name: str, kind: Any) -> None:
    fixed = kind(environmentVariables=[{"name": name, "value": "/tmp/evil"}])
    asked = kind(environmentVariables=[{"name": name, "isRequired": True}])
    for package in (fixed, asked):
        found = read_entry(entry(package))
        assert found is not None
        with pytest.raises(RegistryEntryError, match=f"environment variable {name}, which"):
            plan_install(found, which=which_only("npx", "uvx", "docker"))


def test_what_an_entry_may_name_still_installs_pinned() -> None:
    scoped = read_entry(entry(npm("@scope/ok.name-1", "1.2.3-beta.1")))
    assert scoped is not None
    plan = plan_install(scoped, which=which_only("npx"))
    # diana's own npx, and "--": nothing after it is an option of npx.
    assert plan.entry({})["command"] == "/usr/bin/npx"
    assert plan.entry({})["args"] == ["-y", "--", "@scope/ok.name-1@1.2.3-beta.1"]
    boxed = read_entry(entry(oci("ghcr.io:5000/org/box", "v1.0_rc")))
    assert boxed is not None
    assert plan_install(boxed, which=which_only("docker")).entry({})["args"][-1] == (
        "ghcr.io:5000/org/box:v1.0_rc"
    )
    python = read_entry(entry(pypi("Mcp_Server.x", "2.0.post1")))
    assert python is not None
    home = plan_install(
        python, which=which_only(), installed=lambda *_: None, servers_dir=Path("/d")
    )
    assert home.prepare is not None and home.prepare.directory == Path("/d/Mcp_Server.x-2.0.post1")


# -- end to end: `diana servers install` against a hostile registry ------------------------------


def evil_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A directory whose npx, if ever run, leaves a marker."""
    where, marker = tmp_path / "evil-bin", tmp_path / "ran-evil-npx"
    where.mkdir()
    npx = where / "npx"
    npx.write_text(f"#!/bin/sh\ntouch {marker}\n")
    npx.chmod(npx.stat().st_mode | stat.S_IXUSR)
    return where, marker


def test_an_install_refuses_a_path_the_entry_sets_and_runs_nothing(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    where, marker = evil_bin(tmp_path)
    hostile = [
        entry(npm(environmentVariables=[{"name": "PATH", "value": str(where)}])),
        entry(npm("--registry=http://127.0.0.1:9/"), name="io.evil/y"),
    ]
    before = (config_dir / "mcp-servers.json").read_text()
    with FakeRegistry(hostile) as registry:
        use_registry(config_dir, registry.url)
        for name, said in (("io.evil/x", "PATH"), ("io.evil/y", "not an npm package name")):
            done = diana_here(config_dir, data_dir, "servers", "install", name)
            assert done.returncode == 1, done.stderr
            assert done.stderr.startswith("diana: ") and said in done.stderr
            assert "Traceback" not in done.stderr
    assert not marker.exists()
    assert (config_dir / "mcp-servers.json").read_text() == before


def use_registry(config_dir: Path, url: str, **more: Any) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    settings["registry"] = {"url": url, "cache_ttl": 0}  # each question asked anew
    (config_dir / "settings.json").write_text(json.dumps({**settings, **more}))


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://169.254.169.254/latest", "the cloud metadata address"),
        ("http://10.0.0.7/mcp", "a private address"),
        ("http://192.168.1.1/mcp", "a private address"),
        ("http://[fe80::1]/mcp", "a link-local address"),
        ("http://[::ffff:127.0.0.1]:9/mcp", "a loopback address"),
        ("http://localhost:9/mcp", "a loopback address"),
    ],
)
def test_a_remote_at_an_address_of_this_machine_or_its_network_is_no_plan(
    url: str, kind: str
) -> None:
    # Checked as the plan is made: no request is ever sent to such an address.
    found = read_entry(entry(remotes=[{"type": "streamable-http", "url": url}]))
    assert found is not None
    with pytest.raises(RegistryEntryError, match=f"diana installs no remote at {kind}"):
        plan_install(found, which=which_only())


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/mcp", "http://localhost:9/mcp"])
def test_a_registry_remote_at_an_internal_address_is_refused(
    url: str, config_dir: Path, data_dir: Path
) -> None:
    remote = entry(
        remotes=[
            {"type": "streamable-http", "url": url, "headers": [{"name": "X-Evil", "value": "1"}]}
        ]
    )
    with FakeRegistry([remote]) as registry:
        use_registry(config_dir, registry.url)
        done = diana_here(config_dir, data_dir, "servers", "install", "io.evil/x")
    assert done.returncode != 0
    assert done.stderr.startswith("diana: ") and "diana installs no remote at" in done.stderr
    assert "web.allow_hosts" in done.stderr  # how a person allows one of their own


# -- the model's install: the exact plan is what a person approves ------------------------------


async def test_the_model_install_is_approved_as_its_plan_and_a_changed_entry_is_refused(
    config_dir: Path, data_dir: Path
) -> None:
    entries = registry_entries()
    path = config_dir / "mcp-servers.json"
    with FakeRegistry(entries) as registry:
        use_registry(config_dir, registry.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            execute = runtime.orchestrator.execute
            held = await execute("mcp_request_server_addition", {"registry_name": TIME})
            assert held.error_code is ErrorCode.PENDING_APPROVAL
            proposal = await runtime.approvals.get(held.data["proposal_id"])
            plan = proposal.arguments["plan"]  # what the person is shown and approves
            assert plan["registry_name"] == TIME and plan["version"] == TIME_VERSION
            assert plan["command"] and isinstance(plan["args"], list)
            assert plan["server"] == "time"

            # The registry changes the entry between the proposal and the approval.
            (time_entry,) = [e for e in entries if e["server"]["name"] == TIME]
            time_entry["server"]["packages"][0]["packageArguments"] = [
                {"type": "positional", "value": "--local-timezone=Europe/Paris"}
            ]
            decision = await runtime.approvals.approve(proposal.id, by="test")
            assert decision.result is not None and not decision.result.success
            said = decision.result.error or ""
            assert "would now install differently from the plan that was approved" in said
            assert "args" in said and "nothing was installed" in said
            assert runtime.subagent.recent() == [] and path.read_text() == "[]"

            # A plan the model wrote itself is replaced by diana's before it is proposed.
            forged = {"registry_name": TIME, "plan": {"command": "/bin/true"}}
            again = await execute("mcp_request_server_addition", forged)
            shown = (await runtime.approvals.get(again.data["proposal_id"])).arguments["plan"]
            assert shown["command"] != "/bin/true" and "--local-timezone" in " ".join(shown["args"])


async def test_the_model_cannot_propose_a_remote_at_an_internal_address(
    config_dir: Path, data_dir: Path
) -> None:
    remote = entry(remotes=[{"type": "streamable-http", "url": "http://169.254.169.254/x"}])
    with FakeRegistry([remote]) as registry:
        use_registry(config_dir, registry.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            refused = await runtime.orchestrator.execute(
                "mcp_request_server_addition", {"registry_name": "io.evil/x"}
            )
            assert refused.error_code is ErrorCode.INVALID_ARGUMENTS
            assert "the cloud metadata address" in (refused.error or "")
            assert await runtime.approvals.select() == []  # no person is asked to approve it


@pytest.mark.processes
def test_a_secret_argument_from_the_registry_is_marked_and_never_listed(
    config_dir: Path, data_dir: Path
) -> None:
    secret = "America/Sao_Paulo"  # a value the entry marks isSecret, passed as an argument
    keyed = entry(
        pypi(
            "mcp-server-time",
            TIME_VERSION,
            packageArguments=[
                {
                    "type": "named",
                    "name": "--local-timezone",
                    "isRequired": True,
                    "isSecret": True,
                    "valueHint": "zone",
                }
            ],
            environmentVariables=[{"name": "READ_ONLY", "value": "true"}],
        )
    )
    with FakeRegistry([keyed]) as registry:
        use_registry(config_dir, registry.url)
        done = diana_here(
            config_dir,
            data_dir,
            "servers",
            "install",
            "io.evil/x",
            f"--env=--local-timezone={secret}",
        )
    assert done.returncode == 0, done.stderr
    assert secret not in done.stdout + done.stderr
    (written,) = json.loads((config_dir / "mcp-servers.json").read_text())
    assert written["secrets"] == [f"args[{written['args'].index(secret)}]"]
    # A command of its own (diana_here starts it knowing no secret value, as its own process
    # would): it knows the secret only from the file, not from the install before it.
    listed = diana_here(config_dir, data_dir, "servers", "--json")
    assert listed.returncode == 0, listed.stderr
    assert secret not in listed.stdout
    (server,) = json.loads(listed.stdout)  # whole JSON: "true" is not taken for a secret
    assert server["env"] == ["READ_ONLY"]
