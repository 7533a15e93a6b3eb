"""Run the official MCP conformance suite's client scenarios against diana.

    python bench/conformance.py [--suite 0.1.16|0.1.13] [--dir DIR] [SCENARIO ...]

Installs, from the npm registry, the suite (@modelcontextprotocol/conformance) and what it
needs into DIR (default: ~/.cache/diana-conformance/VERSION): for 0.1.16 the `node` package
(a Node 22 binary, whatever Node the machine has); for 0.1.13 the TypeScript SDK 1.25.2 beside
it (it runs on Node 20). Then runs each client scenario with
bench/conformance_client.py as the client, one at a time (one of them times reconnects), and
prints each scenario's result and the protocol version diana negotiated, then "N of M".
Exit status 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SUITES = {
    "0.1.16": ["@modelcontextprotocol/conformance@0.1.16", "node@22"],
    "0.1.13": ["@modelcontextprotocol/conformance@0.1.13", "@modelcontextprotocol/sdk@1.25.2"],
}
CLIENT = Path(__file__).resolve().parent / "conformance_client.py"
SCENARIO_TIME = 180  # seconds; the suite gives a client 30 s of its own


def install(directory: Path, packages: list[str]) -> dict[str, str]:
    """The suite and what it needs under ``directory`` (installed once); the environment to
    run them in."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "node_modules" / ".bin" / "conformance").exists():
        print(f"installing {' and '.join(packages)} into {directory} …", file=sys.stderr)
        (directory / "package.json").write_text('{"name": "diana-conformance", "private": true}')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", *packages],
            cwd=directory,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    bin_dir = directory / "node_modules" / ".bin"
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def client_scenarios(directory: Path, env: dict[str, str]) -> list[str]:
    listed = subprocess.run(
        ["conformance", "list"], cwd=directory, env=env, capture_output=True, text=True
    ).stdout
    section = listed.split("Client scenarios", 1)[-1]
    return re.findall(r"^\s+- (\S+)", section, re.MULTILINE)


def run_one(directory: Path, env: dict[str, str], scenario: str) -> tuple[bool, str, str]:
    """Whether it passed, the suite's tally, and the protocol diana negotiated."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        command = f"{sys.executable} {CLIENT}"
        try:
            done = subprocess.run(
                ["conformance", "client", "--command", command, "--scenario", scenario],
                cwd=directory,
                env={**env, "DIANA_CONFORMANCE_REPORT": report.name},
                capture_output=True,
                text=True,
                timeout=SCENARIO_TIME,
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            return False, f"no result within {SCENARIO_TIME} s", "?"
        try:
            found = json.loads(Path(report.name).read_text() or "{}")
        except ValueError:
            found = {}
    tally = re.search(r"Passed: [^\n]*", output)
    passed = "OVERALL: PASSED" in output
    protocol = found.get("protocol") or "none (did not connect)"
    return passed, tally.group(0) if tally else output.strip()[-200:], protocol


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=list(SUITES), default="0.1.16")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args()
    directory = args.dir or Path.home() / ".cache" / "diana-conformance" / args.suite
    env = install(directory, SUITES[args.suite])
    scenarios = args.scenarios or client_scenarios(directory, env)
    if not scenarios:
        print("the suite listed no client scenarios", file=sys.stderr)
        return 2
    passed = 0
    for scenario in scenarios:
        ok, tally, protocol = run_one(directory, env, scenario)
        passed += ok
        print(f"{'PASS' if ok else 'FAIL'}  {scenario:<45} {protocol:<24} {tally}", flush=True)
    print(f"\n{passed} of {len(scenarios)} client scenarios passed ({SUITES[args.suite][0]})")
    return 0 if passed == len(scenarios) else 1


if __name__ == "__main__":
    sys.exit(main())
