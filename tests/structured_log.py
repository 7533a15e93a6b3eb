"""diana's structured log as a test reads it: the records of one event, every day's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def log_events(data_dir: Path, event: str) -> list[dict[str, Any]]:
    """The structured log's records of ``event``, every day's file, oldest first."""
    found = []
    for path in sorted((data_dir / "logs").glob("diana*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == event:
                found.append(record)
    return found
