"""diana's database read and written behind its back, as a script or a person with sqlite3 would."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any


def edit_proposal(data_dir: Path, proposal_id: str, **columns: str) -> None:
    """What a process that can write the database could do behind diana's back."""
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        for column, value in columns.items():
            db.execute(f"UPDATE proposals SET {column} = ? WHERE id = ?", (value, proposal_id))
        db.commit()


def proposal_row(data_dir: Path, proposal_id: str) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM proposals WHERE id = ?", (proposal_id,)).fetchone()
    return dict(row)


def query(data_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement on the database, as a script or a person with sqlite3 would."""
    with sqlite3.connect(data_dir / "diana.db", timeout=30) as db:
        return db.execute(sql, params).fetchall()


def proposal_statuses(data_dir: Path) -> list[tuple[str, str]]:
    """(id, status) of every proposal, oldest first, read from diana's database as a person
    with sqlite3 would: cheap enough to look again and again while waiting for one (a
    `diana` command costs a third of a second of CPU). No database yet: none."""
    uri = (data_dir / "diana.db").resolve().as_uri() + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as db:
            query = "SELECT id, status FROM proposals ORDER BY created_at, rowid"
            return [(str(id_), str(status)) for id_, status in db.execute(query)]
    except sqlite3.OperationalError as error:  # not made (or not set up) yet
        if "unable to open" in str(error) or "no such table" in str(error):
            return []
        raise


def any_pending(data_dir: Path) -> bool:
    return any(status == "pending" for _, status in proposal_statuses(data_dir))
