"""The core stays headless: importing all of it loads no Textual and no UI module."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import diana.core

PROBE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] == "textual" or m.startswith("diana.tui"))
print(",".join(leaked))
"""


def test_core_imports_no_ui_module() -> None:
    root = Path(diana.core.__file__).parent
    modules = ["diana.core"] + [
        m.name for m in pkgutil.walk_packages([str(root)], prefix="diana.core.")
    ]
    expected = {"diana.core.calls.orchestrator", "diana.core.runtime", "diana.core.tools.builtin"}
    assert expected <= set(modules)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
