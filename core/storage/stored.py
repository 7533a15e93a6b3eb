"""Values as SQLite stores them: text that is not UTF-8 replaced, configured secrets
masked, and anything past STORED_VALUE_LIMIT cut with a marker; JSON and times read back, a
damaged column named rather than failing."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..content.text import REPLACEMENT, SURROGATES
from ..system.telemetry import SECRET_VALUES

if TYPE_CHECKING:
    import aiosqlite

# Stored copies of a call's arguments and result are cut at this many bytes of JSON (the
# caller still gets the whole result).
STORED_VALUE_LIMIT = 256 * 1024

TOO_DEEP = "[a value nested too deeply to store]"
_TOO_DEEP_JSON = json.dumps(TOO_DEEP)


def to_json(value: Any) -> str:
    """JSON text for any value; what JSON cannot hold is kept as its repr."""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        try:
            return json.dumps(repr(value), ensure_ascii=False)
        except RecursionError:
            return _TOO_DEEP_JSON


def stored_text(text: str | None, what: str, notes: list[str]) -> str | None:
    """``text`` as SQLite can store it: code points that are not UTF-8 (lone surrogates,
    from undecodable bytes or a \\udXXX escape) replaced by U+FFFD, and cut to
    STORED_VALUE_LIMIT bytes with a marker; each change is said in ``notes``."""
    if text is None:
        return None
    text = _clean(text if isinstance(text, str) else str(text), what, notes)
    cut = _cut(text, what, notes)
    return text if cut is None else cut


def stored_json(value: Any, what: str, notes: list[str]) -> str:
    """JSON text of ``value`` as SQLite can store it (see ``stored_text``). A value cut to
    size is stored as one JSON string: the start of its JSON text, then the marker."""
    text = to_json(value)
    if text == _TOO_DEEP_JSON and value != TOO_DEEP:
        notes.append(f"{what}: nested too deeply to store")
    text = _clean(text, what, notes)  # a replacement inside a JSON string keeps it valid
    cut = _cut(text, what, notes)
    return text if cut is None else json.dumps(cut, ensure_ascii=False)


def _clean(text: str, what: str, notes: list[str]) -> str:
    text, replaced = SURROGATES.subn(REPLACEMENT, text)
    if replaced:
        notes.append(f"{what}: {replaced} character(s) that are not UTF-8 replaced by \ufffd")
    return SECRET_VALUES.mask(text)  # a configured secret is never stored


def _cut(text: str, what: str, notes: list[str]) -> str | None:
    """The start of a text over STORED_VALUE_LIMIT bytes and a marker; None if it fits."""
    if len(text) <= STORED_VALUE_LIMIT // 4:  # a UTF-8 character is at most 4 bytes
        return None
    data = text.encode()
    if len(data) <= STORED_VALUE_LIMIT:
        return None
    notes.append(f"{what} cut to {STORED_VALUE_LIMIT:,} of {len(data):,} bytes")
    kept = data[:STORED_VALUE_LIMIT].decode(errors="ignore")
    return f"{kept}… [cut: {len(data):,} bytes, the first {STORED_VALUE_LIMIT:,} kept]"


def stored_time(moment: datetime) -> str:
    """A moment as the execution log stores times (UTC ISO text), so text order is time order."""
    return moment.astimezone(UTC).isoformat()


def loaded_time(text: Any) -> datetime | None:
    """A stored ISO time read back; None for one that is not (a row changed by hand: only
    when it happened is lost, so the row is not taken for damaged)."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def time_text(moment: datetime) -> str:
    """A moment as ISO text, the way a time was stored: what a JSON form of it says."""
    return moment.isoformat()


def loaded_json(text: str | None, what: str, damage: list[str]) -> Any:
    """A stored JSON column read back; a column that is not JSON (a damaged row) is given
    as its text and named in ``damage``, so one bad row never hides the others."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        damage.append(f"{what} is not valid JSON")
        return text


def text_pattern(text: str) -> re.Pattern[str]:
    """``text`` as a whole where it stands in longer text: not the inside of another word
    (a fact "tea" is not scrubbed out of "steady")."""
    before = r"(?<!\w)" if re.match(r"\w", text) else ""
    after = r"(?!\w)" if re.search(r"\w\Z", text) else ""
    return re.compile(before + re.escape(text) + after)


def scrubbed_json(stored: str, pattern: re.Pattern[str], marker: str) -> str:
    """Stored JSON text with ``pattern`` replaced by ``marker`` in every string (keys too),
    so the text stays valid JSON; JSON that cannot be read is scrubbed as text."""
    try:
        value = json.loads(stored)
    except (ValueError, RecursionError):
        return pattern.sub(marker, stored)

    def scrub(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(marker, item)
        if isinstance(item, list):
            return [scrub(x) for x in item]
        if isinstance(item, dict):
            return {scrub(k): scrub(v) for k, v in item.items()}
        return item

    return json.dumps(scrub(value), ensure_ascii=False)


async def scrub_rows(
    connection: aiosqlite.Connection,
    table: str,
    columns: dict[str, bool],
    text: str,
    marker: str,
    where: str = "1",
) -> int:
    """Replace ``text`` by ``marker`` in ``columns`` of ``table`` (each marked whether it
    holds JSON) in the rows ``where`` selects, inside the caller's write transaction; how
    many rows changed. Rows are found by the text as stored (JSON escapes it)."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1]
    pattern = text_pattern(text)
    holds = " OR ".join(f"instr({c}, ?) > 0" for c in columns)
    needles = [escaped if is_json else text for is_json in columns.values()]
    names = ", ".join(columns)
    async with connection.execute(
        f"SELECT rowid, {names} FROM {table} WHERE ({where}) AND ({holds})", needles
    ) as cursor:
        rows = list(await cursor.fetchall())
    changed = 0
    for row in rows:
        values = [
            None
            if row[n + 1] is None
            else scrubbed_json(row[n + 1], pattern, marker)
            if is_json
            else pattern.sub(marker, row[n + 1])
            for n, is_json in enumerate(columns.values())
        ]
        if values != [row[n + 1] for n in range(len(columns))]:
            sets = ", ".join(f"{c} = ?" for c in columns)
            await connection.execute(
                f"UPDATE {table} SET {sets} WHERE rowid = ?", (*values, row[0])
            )
            changed += 1
    return changed
