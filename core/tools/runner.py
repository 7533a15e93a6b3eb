"""Runs one local tool call in its own process:  python -m diana.core.tools.runner SCRIPT

The script defines ``run(arguments)`` (plain or async) and returns anything JSON can hold.
The arguments arrive as JSON on stdin; the answer leaves as one JSON object on stdout
(``{"ok": true, "result": ...}`` or ``{"ok": false, "error": ...}``). Whatever the script
prints itself goes to stderr, so it cannot spoil the answer."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from typing import Any


def main(argv: list[str]) -> int:
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # the script's own prints go to stderr
    sys.stdout = sys.stderr
    try:
        result = _call(argv[1], json.loads(sys.stdin.read() or "{}"))
        answer: dict[str, Any] = {"ok": True, "result": result}
        code = 0
    except Exception as exc:
        traceback.print_exc()
        answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        code = 1
    try:
        text = json.dumps(answer, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        text = json.dumps({"ok": False, "error": f"the result is not JSON: {exc}"})
        code = 1
    with os.fdopen(answer_fd, "w", encoding="utf-8") as out:
        out.write(text)
    return code


def _call(script: str, arguments: Any) -> Any:
    spec = importlib.util.spec_from_file_location("diana_local_tool", script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = getattr(module, "run", None)
    if not callable(run):
        raise AttributeError(f"{script} has no run(arguments) function")
    value = run(arguments)
    if hasattr(value, "__await__"):  # an async run(): asyncio is imported only then
        import asyncio

        async def wait() -> Any:
            return await value

        value = asyncio.run(wait())
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv))
