"""`diana chats` and `diana ask --chat/--system`, run as a person would against a fake Ollama
over real HTTP and the real database."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .chat_turns import chat_requests, configure
from .commands import diana_here
from .fixtures.fake_ollama import FakeOllama


def ask(config_dir: Path, data_dir: Path, *args: str) -> str:
    done = diana_here(config_dir, data_dir, "ask", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed(config_dir: Path, data_dir: Path, *args: str) -> list[dict[str, object]]:
    done = diana_here(config_dir, data_dir, "chats", *args, "--json")
    assert done.returncode == 0, done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found


def test_list_search_show_rename_export_and_rm(
    fake: FakeOllama, config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, host=fake.url)
    fake.add({"content": "Knead it for ten minutes."}, {"content": "Pump the tyres."})
    ask(config_dir, data_dir, "how do I make bread?")
    ask(config_dir, data_dir, "my bicycle wobbles")
    bike, bread = listed(config_dir, data_dir)
    assert (bike["title"], bike["messages"], bike["origin"]) == ("my bicycle wobbles", 2, "cli")

    table = diana_here(config_dir, data_dir, "chats").stdout.splitlines()
    assert table[0].split() == ["ID", "LAST", "USED", "MODEL", "MSGS", "FROM", "TITLE"]
    assert table[1].startswith(str(bike["id"])) and table[1].endswith("my bicycle wobbles")

    found = diana_here(config_dir, data_dir, "chats", "search", "knead").stdout
    assert str(bread["id"]) in found and str(bike["id"]) not in found
    assert [c["id"] for c in listed(config_dir, data_dir, "--search", "tyre")] == [bike["id"]]
    assert diana_here(config_dir, data_dir, "chats", "search", 'NEAR("x")').stdout.strip() == (
        "no conversation matches"
    )

    shown = diana_here(config_dir, data_dir, "chats", "show", str(bread["id"])).stdout
    assert shown.startswith("# how do I make bread?")
    assert "Knead it for ten minutes." in shown

    renamed = diana_here(config_dir, data_dir, "chats", "rename", str(bread["id"]), "Baking", "day")
    assert renamed.stdout.strip() == f"renamed {bread['id']}: Baking day"

    out = tmp_path / "bread.json"
    exported = diana_here(
        config_dir, data_dir, "chats", "export", str(bread["id"]), "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text())  # .json: JSON unless --format says otherwise
    assert document["title"] == "Baking day"
    assert [m["content"] for m in document["messages"]] == [
        "how do I make bread?",
        "Knead it for ten minutes.",
    ]

    refused = diana_here(config_dir, data_dir, "chats", "rm", str(bike["id"]))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"diana: removing conversation {bike['id']} needs --yes when there is no terminal"
    )
    removed = diana_here(config_dir, data_dir, "chats", "rm", str(bike["id"]), "--yes")
    assert removed.returncode == 0, removed.stderr
    assert [c["id"] for c in listed(config_dir, data_dir)] == [bread["id"]]


@pytest.mark.parametrize(
    "args",
    [
        ("show", "nope"),
        ("rename", "nope", "title"),
        ("rm", "nope", "--yes"),
        ("export", "nope"),
        ("show", "n\udcffpe"),
    ],
)
def test_an_unknown_id_is_one_line_naming_it(
    config_dir: Path, data_dir: Path, args: tuple[str, ...]
) -> None:
    done = diana_here(config_dir, data_dir, "chats", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("diana: no conversation 'n")
    assert line.endswith("(diana chats list shows them)")


def test_bad_titles_and_export_targets_are_one_line(
    fake: FakeOllama, config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    configure(config_dir, host=fake.url)
    fake.add({"content": "ok"})
    ask(config_dir, data_dir, "hello")
    (chat,) = listed(config_dir, data_dir)
    chat_id = str(chat["id"])
    secret = tmp_path / "secret.txt"
    secret.write_text("keep me")
    link = tmp_path / "link.md"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    cases = {
        ("rename", chat_id, " "): "diana: a conversation's title cannot be empty",
        ("rename", chat_id, "x" * 5000): (
            "diana: a conversation's title is at most 200 characters, not 5,000"
        ),
        ("export", chat_id, "--out", str(link)): (
            f"diana: --out {link} is a symbolic link; name the file itself"
        ),
        ("export", chat_id, "--out", str(fifo)): (
            f"diana: --out {fifo} is a FIFO (named pipe), not a regular file"
        ),
        ("export", chat_id, "--out", str(tmp_path / "no" / "x.md")): (
            f"diana: --out {tmp_path / 'no' / 'x.md'} cannot be written: there is no folder "
            f"{tmp_path / 'no'}"
        ),
    }
    for args, said in cases.items():
        done = diana_here(config_dir, data_dir, "chats", *args)
        assert (done.returncode, done.stderr.strip()) == (2, said), args
    assert secret.read_text() == "keep me"
    assert (listed(config_dir, data_dir)[0]["title"]) == "hello"


def test_ask_goes_on_with_a_chat_and_keeps_its_system_prompt(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, host=fake.url)
    fake.add({"content": "Bonjour."}, {"content": "Other."}, {"content": "Ça va."})
    ask(config_dir, data_dir, "hello", "--system", "Answer in French.")
    (chat,) = listed(config_dir, data_dir)
    ask(config_dir, data_dir, "something else")  # its own, new conversation
    ask(config_dir, data_dir, "how are you?", "--chat", str(chat["id"]))

    first, other, went_on = chat_requests(fake)
    assert first["messages"][0]["content"].endswith("Answer in French.")
    assert "Answer in French." not in other["messages"][0]["content"]
    assert went_on["messages"][0]["content"].endswith("Answer in French.")
    assert [m["content"] for m in went_on["messages"][1:]] == ["hello", "Bonjour.", "how are you?"]
    assert listed(config_dir, data_dir)[0]["messages"] == 4

    missing = diana_here(config_dir, data_dir, "ask", "hi", "--chat", "gone")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "diana: no conversation 'gone' (diana chats list shows them)"
    assert len(chat_requests(fake)) == 3  # nothing was asked


@pytest.mark.processes  # on a terminal (a pty)
def test_the_list_fits_an_80_column_terminal_and_is_whole_piped(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    from rich.cells import cell_len

    from .commands import on_a_terminal

    fake.models.append("a-model-with-a-rather-long-name:70b-q4")
    configure(config_dir, host=fake.url, model="a-model-with-a-rather-long-name:70b-q4")
    long = "how do I plan a two-week trip through Portugal by train with a bicycle"
    fake.add({"content": "ok"})
    ask(config_dir, data_dir, long)
    (chat,) = listed(config_dir, data_dir)
    shown = on_a_terminal(config_dir, data_dir, "chats", width=80).splitlines()
    assert all(cell_len(line) <= 80 for line in shown), shown
    assert shown[1].startswith(str(chat["id"]))  # the id is never cut
    assert long[:20] in shown[1] and shown[1].rstrip().endswith("…")
    whole = diana_here(config_dir, data_dir, "chats")
    assert whole.returncode == 0, whole.stderr
    piped = whole.stdout.splitlines()
    assert piped[1].endswith(long[:60]) and "a-model-with-a-rather-long-name:70b-q4" in piped[1]
