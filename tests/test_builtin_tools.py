"""The built-in agents: memory, Obsidian daily log, current time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from diana.core.models import ErrorCode, RiskLevel
from diana.core.runtime import Profile, Runtime
from markdown_it import MarkdownIt

from .conftest import stepping_clock


async def test_search_memory_ranks_the_best_match_first(runtime: Runtime) -> None:
    orch = runtime.orchestrator
    for content in (
        "The user's cat is called Miso",
        "Dentist appointment on Friday",
        "Miso soup recipe: miso, dashi, tofu; the cat likes miso",
    ):
        assert (await orch.execute("save_fact", {"content": content})).success

    result = await orch.execute("search_memory", {"query": "miso cat", "limit": 2})

    assert result.success
    contents = [r["content"] for r in result.data["results"]]
    assert len(contents) == 2
    assert contents[0].startswith("Miso soup")  # most occurrences of both words
    assert "Dentist" not in " ".join(contents)


async def test_search_memory_treats_query_syntax_as_plain_words(runtime: Runtime) -> None:
    await runtime.orchestrator.execute("save_fact", {"content": "NEAR the AND gate"})
    result = await runtime.orchestrator.execute("search_memory", {"query": 'NEAR( "AND'})
    assert result.success
    assert [r["content"] for r in result.data["results"]] == ["NEAR the AND gate"]


async def test_obsidian_log_appends_and_never_overwrites(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    vault = tmp_path / "vault"
    (config_dir / "settings.json").write_text(
        json.dumps({"obsidian": {"vault": str(vault), "daily_folder": "Journal/Daily"}})
    )
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    note = vault / "Journal" / "Daily" / "2026-03-14.md"
    try:
        # Confident enough that a reversible-with-delay call needs no approval.
        first = await runtime.orchestrator.execute(
            "obsidian_log", {"entry": "Started the day"}, confidence=0.9
        )
        assert first.success and first.data["path"] == str(note)
        note.write_text(note.read_text() + "A line the person wrote by hand\n")
        second = await runtime.orchestrator.execute(
            "obsidian_log", {"entry": "Lunch"}, confidence=0.9
        )
        assert second.success
    finally:
        await runtime.close()

    assert note.read_text() == (
        "# 2026-03-14\n\n"
        "- 09:26:53 Started the day\n"
        "A line the person wrote by hand\n"
        "- 09:26:53 Lunch\n"
    )


async def test_an_obsidian_log_entry_is_one_entry_whatever_its_newlines(
    runtime: Runtime,
) -> None:
    forged = (
        "Met Ada\n# Forged heading\n- 23:59:59 forged entry\r# after a lone CR\r\n\n   \nlast line"
    )
    first = await runtime.orchestrator.execute("obsidian_log", {"entry": forged}, confidence=0.9)
    second = await runtime.orchestrator.execute("obsidian_log", {"entry": "Lunch"}, confidence=0.9)
    assert first.success and second.success
    note = Path(first.data["path"]).read_text()

    assert note == (
        "# 2026-03-14\n\n"
        "- 09:26:53 Met Ada\n"
        "  # Forged heading\n"
        "  - 23:59:59 forged entry\n"
        "  # after a lone CR\n"
        "\n"
        "\n"
        "  last line\n"
        "- 09:26:53 Lunch\n"
    )
    assert first.data["entry"] == note.removeprefix("# 2026-03-14\n\n").split("\n- ")[0]
    # As Markdown (CommonMark, as Obsidian reads it): one heading and two entries at the top.
    tokens = MarkdownIt("commonmark").parse(note)
    top = [t.type for t in tokens if t.level == 0 and t.nesting == 1]
    assert top == ["heading_open", "bullet_list_open"]
    items = [t for t in tokens if t.type == "list_item_open" and t.level == 1]
    assert len(items) == 2


async def test_obsidian_log_concurrent_entries_are_all_kept(
    runtime: Runtime, tmp_path: Path
) -> None:
    results = await asyncio.gather(
        *(
            runtime.orchestrator.execute("obsidian_log", {"entry": f"entry {i}"}, confidence=0.9)
            for i in range(20)
        )
    )
    assert all(r.success for r in results)
    text = Path(results[0].data["path"]).read_text()
    assert sorted(line.split()[-1] for line in text.splitlines()[2:]) == sorted(
        str(i) for i in range(20)
    )


async def test_get_current_time_in_a_time_zone(runtime: Runtime) -> None:
    result = await runtime.orchestrator.execute(
        "get_current_time", {"timezone": "America/New_York"}
    )
    assert result.success
    assert result.data["iso"].startswith("2026-03-14T05:26:53")
    assert result.data["utc_offset"] == "-0400"
    assert result.data["timezone"] == "America/New_York"
    assert result.data["unix"] == 1773480413
    # The names seed 002 gives them, beside the fields above.
    assert result.data["timestamp"] == result.data["iso"]
    assert result.data["unix_epoch"] == 1773480413


async def test_get_current_time_names_a_bad_time_zone(runtime: Runtime) -> None:
    result = await runtime.orchestrator.execute("get_current_time", {"timezone": "Mars/Base"})
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == 'argument "timezone": unknown time zone "Mars/Base"'


async def test_builtin_tools_declare_their_risk(runtime: Runtime) -> None:
    risks = {d.name: d.risk for d, _ in runtime.orchestrator.tool_definitions()}
    assert risks == {
        "save_fact": RiskLevel.REVERSIBLE,
        "search_memory": RiskLevel.REVERSIBLE,
        "get_current_time": RiskLevel.REVERSIBLE,
        "obsidian_log": RiskLevel.REVERSIBLE_WITH_DELAY,
        "request_human_input": RiskLevel.REVERSIBLE,
        "code_execution": RiskLevel.IRREVERSIBLE,
        "mcp_request_server_addition": RiskLevel.IRREVERSIBLE,
        "mcp_check_subagent_status": RiskLevel.REVERSIBLE,
        "mcp_cancel_subagent_work": RiskLevel.REVERSIBLE,
        "mcp_list_available_tools": RiskLevel.REVERSIBLE,
        "web_search": RiskLevel.REVERSIBLE,
        "web_fetch": RiskLevel.REVERSIBLE,
        "mcp_search_servers": RiskLevel.REVERSIBLE,
        "mcp_request_server_change": RiskLevel.IRREVERSIBLE,
        "mcp_request_server_removal": RiskLevel.IRREVERSIBLE,
        "mcp_test_server": RiskLevel.REVERSIBLE,
    }
