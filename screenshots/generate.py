"""Write screenshots/*.svg from the same scenarios the snapshot tests use.

Run from the repository root:  .venv/bin/python screenshots/generate.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["TEXTUAL_ANIMATIONS"] = "none"

from tests.scenarios import SCENARIOS, scenario_app  # noqa: E402


async def shoot(name: str) -> Path:
    with tempfile.TemporaryDirectory() as tmp, scenario_app(name, Path(tmp)) as app:
        async with app.run_test(size=SCENARIOS[name].size) as pilot:
            await SCENARIOS[name].run(pilot)
            path = app.save_screenshot(filename=f"{name}.svg", path=str(ROOT / "screenshots"))
    return Path(path)


def main() -> None:
    for name in SCENARIOS:
        print(asyncio.run(shoot(name)))


if __name__ == "__main__":
    main()
