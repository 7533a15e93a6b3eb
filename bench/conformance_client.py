"""diana as the client of the MCP conformance suite's client scenarios.

The suite runs ``python bench/conformance_client.py SERVER_URL`` with MCP_CONFORMANCE_SCENARIO
set (and MCP_CONFORMANCE_CONTEXT for scenarios that hand the client credentials). This script
does what a person would: writes a server entry for the URL into a fresh config dir (an
``auth`` block from the context), signs in when the scenario is about OAuth (the browser is
tests/fixtures/headless_browser.py, through $BROWSER), and calls every tool the server lists
through diana's core, answering any form a server asks for with its defaults. All MCP work is
diana's own code: the Runtime, its connection, its OAuth and its elicitation handling.

DIANA_CONFORMANCE_REPORT names a JSON file for what happened (protocol version, tools, calls).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.config.mcp_servers import agent_id_for  # noqa: E402
from diana.core.mcp.elicitation_form import Answer, Elicitation  # noqa: E402
from diana.core.ports import Ports  # noqa: E402
from diana.core.runtime import Profile, Runtime  # noqa: E402

SERVER = "conformance"
# Where a client ID metadata document would be published for diana (the suite checks the URL
# given, and never fetches it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
BROWSER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'headless_browser.py'} %s"


def auth_block(scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """What a person would write in mcp-servers.json for this server."""
    if "private_key_pem" in context:
        return {
            "grant": "client_credentials",
            "client_id": context["client_id"],
            "private_key_pem": context["private_key_pem"],
            "signing_algorithm": context.get("signing_algorithm", "ES256"),
        }
    if scenario.startswith("auth/client-credentials"):
        return {
            "grant": "client_credentials",
            "client_id": context["client_id"],
            "client_secret": context["client_secret"],
        }
    block: dict[str, Any] = {"client_metadata_url": CLIENT_METADATA_URL}
    if "client_id" in context:  # a client registered beforehand
        block.update(client_id=context["client_id"])
        if context.get("client_secret"):
            block.update(client_secret=context["client_secret"])
    return block


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    """Plain values for a tool's required arguments."""
    values: dict[str, Any] = {}
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        kind = properties.get(name, {}).get("type")
        values[name] = {"number": 5, "integer": 3, "boolean": True}.get(str(kind), "x")
    return values


async def person_accepts_defaults(request: Elicitation) -> Answer:
    """The form as the server filled it in, sent unchanged."""
    content = {f.name: f.default for f in request.fields if f.default is not None}
    return Answer("accept", content)


def write_config(scratch: str, entry: dict[str, Any]) -> tuple[Path, Path]:
    config_dir, data_dir = Path(scratch, "config"), Path(scratch, "data")
    config_dir.mkdir()
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {SERVER: entry}}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {SERVER: "allow"}}))
    return config_dir, data_dir


async def run(url: str, scenario: str, context: dict[str, Any], report: dict[str, Any]) -> int:
    entry: dict[str, Any] = {"url": url}
    if scenario.startswith("auth/"):
        entry["auth"] = auth_block(scenario, context)
    with tempfile.TemporaryDirectory(prefix="diana-conformance-") as scratch:
        config_dir, data_dir = write_config(scratch, entry)
        ports = Ports(answer_server=person_accepts_defaults)
        async with await Runtime.open(
            Profile.APP.but(servers="on_demand", share=False, watch=False),
            config_dir,
            data_dir,
            ports=ports,
        ) as runtime:
            if scenario.startswith("auth/") and "grant" not in entry["auth"]:
                connection = await runtime.mcp.sign_in(SERVER)
                await connection.wait_attempt_after_reconnect()
            else:
                connection = await runtime.mcp.connected(SERVER)
            state = connection.state
            report["protocol"] = state.protocol_version
            if not state.last_attempt_ok:
                report["error"] = state.last_error
                return 1
            report["tools"] = [tool.name for tool in state.tools]
            failed = 0
            for definition, agent in runtime.orchestrator.tool_definitions():
                if agent != agent_id_for(SERVER):
                    continue
                arguments = arguments_for(definition.parameters)
                result = await runtime.call_tool(definition.name, arguments, origin="conformance")
                report.setdefault("calls", []).append(
                    {"tool": definition.name, "ok": result.success, "error": result.error}
                )
                failed += not result.success
            return 1 if failed else 0


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    os.environ["BROWSER"] = BROWSER
    report: dict[str, Any] = {"scenario": scenario}
    try:
        code = asyncio.run(run(url, scenario, context, report))
    except Exception as exc:  # what diana raised, for the report; the suite sees exit 1
        report["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    out = os.environ.get("DIANA_CONFORMANCE_REPORT")
    if out:
        Path(out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
