"""docs/door.md is the door as the code has it: every public method of Core, the names the
front ends may use, the modules they may import and the profiles, regenerated and compared."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "generate_door", ROOT / "docs" / "generate_door.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_door_page_matches_the_code() -> None:
    written = (ROOT / "docs" / "door.md").read_text(encoding="utf-8")
    assert written == generator().render(), "run: python docs/generate_door.py"


def test_the_door_page_names_every_public_method_of_core() -> None:
    from diana.core.api import Core

    page = generator().render()
    public = [name for name in vars(Core) if not name.startswith("_")]
    assert len(public) > 40  # the count is of something real
    missing = [name for name in public if f".{name}" not in page and name != "open"]
    assert missing == []
    assert "Core.open(" in page
