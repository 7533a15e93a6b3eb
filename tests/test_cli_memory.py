"""`diana memory`: list, search, show and forget facts from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from .commands import diana
from .fixtures.fake_ollama import FakeOllama
from .memory_eval import EMBED_MODEL, write_settings


def test_memory_lists_searches_shows_and_forgets_facts(config_dir: Path, data_dir: Path) -> None:
    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL]) as fake:
        write_settings(config_dir, fake.url)
        for content in ("Ada prefers tea", "Ada's cat is called Miso"):
            args = json.dumps({"content": content, "tags": ["ada"]})
            assert diana(config_dir, data_dir, "call", "save_fact", "--args", args).returncode == 0
        listed = diana(config_dir, data_dir, "memory", "--json")
        assert [f["content"] for f in json.loads(listed.stdout)] == [
            "Ada's cat is called Miso",
            "Ada prefers tea",
        ]
        found = json.loads(diana(config_dir, data_dir, "memory", "search", "tea", "--json").stdout)
        assert found["mode"] == "hybrid" and found["results"][0]["content"] == "Ada prefers tea"
        tea = found["results"][0]["id"]
        shown = diana(config_dir, data_dir, "memory", "show", str(tea))
        assert f"fact {tea}: Ada prefers tea" in shown.stdout and "embedded yes" in shown.stdout
        forgot = diana(config_dir, data_dir, "memory", "forget", str(tea))
        assert forgot.stdout == f"forgot fact {tea}: Ada prefers tea\n"
        again = diana(config_dir, data_dir, "memory", "show", str(tea))
        assert again.returncode == 2
        assert again.stderr == f"diana: no fact {tea} in memory (diana memory list shows them)\n"
        bad = diana(config_dir, data_dir, "memory", "forget", "x")
        assert (bad.returncode, bad.stderr) == (2, "diana: a fact id is a number, not 'x'\n")
