"""Pictures that go with a question: read only from a regular file whose first bytes say
PNG, JPEG, GIF or WebP, of at most 20 MiB (a FIFO never waited on, a device never read);
sent in Ollama's `images` field to a model that takes them, refused before anything is sent
to one that does not; kept with the conversation and sent again on later turns. Against the
real database, the real ollama client and a fake Ollama over real HTTP."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from diana.core.chat.images import (
    IMAGE_LIMIT,
    BadImage,
    dropped_path,
    read_image,
    read_images,
)
from diana.tui.app import DianaApp
from diana.tui.footer import Key
from diana.tui.panes import ChatPane
from diana.tui.panes.transcript import PROMPT
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from .chat_turns import Events, chat_requests, start
from .fixtures.fake_ollama import VISION_MODEL, FakeOllama
from .scenarios import app_of, ask, build_app, settle, type_command, until
from .waits import settled, work_done

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 60
GIF = b"GIF89a" + b"\x00" * 30
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 20


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(models=["qwen3:30b-a3b", VISION_MODEL, "gemma3:1b"]) as server:
        yield server


def picture(folder: Path, name: str = "cat.png", data: bytes = PNG) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# -- reading a picture ---------------------------------------------------------------------


def test_png_jpeg_gif_and_webp_are_known_by_their_bytes_whatever_their_name(
    tmp_path: Path,
) -> None:
    for data, mime in ((PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif")):
        image = read_image(picture(tmp_path, "no-extension", data))
        assert (image.mime, image.size, image.data) == (mime, len(data), data)
    webp = read_image(picture(tmp_path, "photo.webp", WEBP))
    assert webp.mime == "image/webp" and webp.name == "photo.webp"
    assert webp.shown == f"📷 photo.webp ({len(WEBP)} bytes)"


def test_what_is_not_a_readable_picture_is_refused_in_one_line_naming_it(
    tmp_path: Path,
) -> None:
    text = picture(tmp_path, "notes.png", b"just some text, not a picture")
    empty = picture(tmp_path, "empty.png", b"")
    huge = tmp_path / "huge.png"
    with huge.open("wb") as out:  # sparse: its size says too large, nothing is read
        out.write(PNG)
        out.truncate(IMAGE_LIMIT + 1)
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.png"
    loop.symlink_to(loop)
    zero = tmp_path / "zero.png"
    zero.symlink_to("/dev/zero")
    expected = {
        text: "is not an image: diana takes PNG, JPEG, GIF or WebP pictures (by their content)",
        empty: "is empty: diana takes PNG, JPEG, GIF or WebP pictures (by their content)",
        huge: "is larger than 20 MiB, too large for an image",
        fifo: "is a FIFO (named pipe), not a regular file",
        loop: "is a symbolic link that loops (too many levels of links)",
        zero: "is a symbolic link to /dev/zero, a character device, not a regular file",
        tmp_path: "is a directory, not a regular file",
        tmp_path / "missing.png": "cannot read: No such file or directory",
    }
    for path, reason in expected.items():
        with pytest.raises(BadImage) as caught:
            read_image(path)
        assert str(caught.value) == f"image {path} {reason}"
        assert "\n" not in str(caught.value)


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    locked = picture(tmp_path, "locked.png")
    locked.chmod(0)
    if os.access(locked, os.R_OK):
        pytest.skip("running as root: every file can be read")
    with pytest.raises(BadImage, match=r"locked\.png cannot read: Permission denied"):
        read_image(locked)


def test_more_than_eight_pictures_with_one_question_are_refused(tmp_path: Path) -> None:
    many = [str(picture(tmp_path, f"{n}.png")) for n in range(9)]
    with pytest.raises(BadImage, match="at most 8 images go with one question, not 9"):
        read_images(many)


def test_odd_names_are_files_a_name_not_utf8_is_shown_with_a_replacement(tmp_path: Path) -> None:
    dashed = picture(tmp_path, "--help")
    assert read_image(str(dashed)).name == "--help"
    picture(tmp_path)
    (tmp_path / "sub").mkdir()
    assert read_image(f"{tmp_path}/sub/../cat.png").name == "cat.png"
    raw = os.fsencode(tmp_path) + b"/caf\xe9.png"
    with open(raw, "wb") as out:
        out.write(PNG)
    image = read_image(os.fsdecode(raw))  # as argv hands it over
    assert image.name == "caf\ufffd.png"
    assert image.data == PNG


def test_a_pasted_or_dropped_path_to_a_picture_is_recognised(tmp_path: Path) -> None:
    spaced = picture(tmp_path, "my cat.png")
    assert dropped_path(str(spaced)) == spaced
    assert dropped_path(f"'{spaced}'") == spaced
    assert dropped_path(str(spaced).replace(" ", "\\ ")) == spaced
    assert dropped_path(f"file://{str(spaced).replace(' ', '%20')}") == spaced
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    text = picture(tmp_path, "notes.png", b"words")
    for message in (str(fifo), str(text), "what is in /tmp?", f"{spaced} and more", ""):
        assert dropped_path(message) is None


# -- a picture with a question -------------------------------------------------------------


async def test_a_picture_reaches_a_vision_model_and_is_sent_again_on_later_turns(
    config_dir: Path, data_dir: Path, fake: FakeOllama, tmp_path: Path
) -> None:
    fake.add({"content": "A cat."}, {"content": "Grey."})
    image = read_image(picture(tmp_path))
    async with await start(config_dir, data_dir, fake.url, model=VISION_MODEL) as runtime:
        chat = runtime.chat
        await chat.run_turn("what is this?", Events(), images=[image])
        await chat.run_turn("what colour?", Events())
        conversation = chat.conversation_id
        assert conversation is not None
    first, second = chat_requests(fake)
    sent = base64.b64encode(PNG).decode()
    assert first["messages"][-1] == {"role": "user", "content": "what is this?", "images": [sent]}
    asked = [m for m in second["messages"] if m["role"] == "user"]
    assert asked[0]["images"] == [sent] and "images" not in asked[1]
    # Reopened in another runtime: the question keeps its picture, and the model gets it.
    fake.add({"content": "Still a cat."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        messages = await runtime.chat.open(conversation)
        assert messages[0].data["images"][0]["name"] == "cat.png"
        await runtime.chat.run_turn("sure?", Events())
        exported = await runtime.chat.chats.export(conversation)
        as_json = await runtime.chat.chats.export(conversation, "json")
    assert f"what is this?\n- 📷 cat.png ({len(PNG)} bytes)" in exported
    assert '"images": [\n        {\n          "name": "cat.png"' in as_json
    assert sent not in as_json  # an export names the picture, without its bytes
    again = chat_requests(fake)[-1]
    assert next(m.get("images") for m in again["messages"] if m["role"] == "user") == [sent]


async def test_a_model_without_vision_refuses_the_picture_before_anything_is_sent(
    config_dir: Path, data_dir: Path, fake: FakeOllama, tmp_path: Path
) -> None:
    image = read_image(picture(tmp_path))
    async with await start(config_dir, data_dir, fake.url) as runtime:
        with pytest.raises(BadImage) as caught:
            await runtime.chat.run_turn("what is this?", Events(), images=[image])
        assert runtime.chat.conversation_id is None  # nothing kept either
        assert await runtime.chat.chats.recent() == []
    assert str(caught.value) == (
        'model "qwen3:30b-a3b" does not take images — installed models that take images: '
        "llava:7b (/model NAME)"
    )
    assert chat_requests(fake) == []


# -- how full the context is ---------------------------------------------------------------


async def test_past_nine_tenths_of_the_context_the_chat_says_once_older_messages_will_go(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.context_length = {"qwen3:30b-a3b": 40960}
    fake.add({"content": "ok", "prompt_tokens": 30000})
    fake.add({"content": "ok", "prompt_tokens": 37000}, {"content": "ok", "prompt_tokens": 38000})
    async with await start(config_dir, data_dir, fake.url, gap_check=False) as runtime:
        chat = runtime.chat
        notices = []
        for question in ("one", "two", "three"):
            await chat.run_turn(question, Events())
            notices.append(chat.context_notice())
    assert notices[0] is None and notices[2] is None  # under 90%; then said once
    assert notices[1] == (
        "this conversation fills 90% of the model's context (37,001 of 40,960 tokens): from "
        "here on its oldest messages stop being sent to the model — /clear starts a new "
        "conversation, /set num_ctx N gives it more room"
    )


# -- diana ask --image ---------------------------------------------------------------------


@pytest.mark.processes
def test_ask_image_sends_it_and_bad_images_are_one_line(
    config_dir: Path, data_dir: Path, fake: FakeOllama, tmp_path: Path
) -> None:
    from .commands import ask

    fake.add({"content": "Two cats."})
    one, two = picture(tmp_path, "a.png"), picture(tmp_path, "b.jpg", JPEG)
    done = ask(
        config_dir,
        data_dir,
        fake.url,
        "what is here?",
        "--model",
        VISION_MODEL,
        "--image",
        str(one),
        "--image",
        str(two),
    )
    assert done.returncode == 0, done.stderr
    assert "Two cats." in done.stdout
    assert f"📷 a.png ({len(PNG)} bytes)" in done.stderr
    (request,) = chat_requests(fake)
    assert request["messages"][-1]["images"] == [
        base64.b64encode(PNG).decode(),
        base64.b64encode(JPEG).decode(),
    ]
    notes = picture(tmp_path, "notes.png", b"hello")
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for path, reason in (
        (notes, "is not an image: diana takes PNG, JPEG, GIF or WebP pictures (by their content)"),
        (fifo, "is a FIFO (named pipe), not a regular file"),
    ):
        refused = ask(config_dir, data_dir, fake.url, "hi", "--image", str(path))
        assert (refused.returncode, refused.stdout) == (2, "")
        assert refused.stderr == f"diana: --image: image {path} {reason}\n"
    no_vision = ask(config_dir, data_dir, fake.url, "hi", "--image", str(one))
    assert no_vision.returncode == 2
    assert no_vision.stderr.endswith(
        'diana: --image: model "qwen3:30b-a3b" does not take images — installed models that '
        "take images: llava:7b (/model NAME)\n"
    )
    assert len(chat_requests(fake)) == 1  # nothing more was sent


# -- in the app ----------------------------------------------------------------------------


async def drop(pilot: Pilot[int], text: str) -> None:
    """Text dropped (or pasted) into the chat's input, as a terminal hands it over."""
    app = app_of(pilot)
    entry = app.query_one("#chat-input", Input)
    entry.focus()
    await pilot.pause()
    entry.post_message(events.Paste(text))
    await pilot.pause()
    await work_done(app, "image")
    await settled(app)


def shown(app: DianaApp) -> str:
    return " ".join(app.query_one(ChatPane).plain_text().split())


async def test_image_in_the_chat_goes_with_the_next_message_and_shows_again_when_reopened(
    fake: FakeOllama, tmp_path: Path
) -> None:
    cat = picture(tmp_path, "my cat.png")
    fake.add({"content": "A grey cat."}, {"content": "Asleep."})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await type_command(pilot, f"/model {VISION_MODEL}")
        await type_command(pilot, f"/image {cat}")
        assert f"📷 my cat.png ({len(PNG)} bytes) — goes with your next message" in shown(app)
        await ask(pilot, "what is this?")
        await drop(pilot, f"'{cat}'")  # a dropped path: attached, not typed in
        assert app.query_one("#chat-input", Input).value == ""
        await ask(pilot, "and now?")
    first, second = chat_requests(fake)
    sent = base64.b64encode(PNG).decode()
    assert first["messages"][-1]["images"] == [sent]
    assert [m.get("images") for m in second["messages"] if m["role"] == "user"] == [[sent]] * 2
    again = build_app(tmp_path, ollama=fake.url)
    async with again.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await until(lambda: "Reopened" in shown(again))
        assert f"{PROMPT}what is this? 📷 my cat.png ({len(PNG)} bytes) A grey cat." in shown(again)


async def test_image_in_the_chat_is_refused_for_a_model_without_vision_and_for_bad_files(
    fake: FakeOllama, tmp_path: Path
) -> None:
    cat, notes = picture(tmp_path), picture(tmp_path, "notes.png", b"words")
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await type_command(pilot, f"/image {cat}")
        await type_command(pilot, f"/image {notes}")
        await type_command(pilot, "/image")
        text = shown(app)
        assert (
            'model "qwen3:30b-a3b" does not take images — installed models that take images: '
            "llava:7b (/model NAME)." in text
        )
        assert f"image {notes} is not an image" in text
        assert "usage: /image PATH" in text  # nothing waits to go
    assert chat_requests(fake) == []


async def test_the_chat_title_shows_the_context_filled_and_warns_past_nine_tenths(
    fake: FakeOllama, tmp_path: Path
) -> None:
    fake.context_length = {"qwen3:30b-a3b": 8192}
    fake.add({"content": "ok", "prompt_tokens": 3100}, {"content": "ok", "prompt_tokens": 7500})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        pane = app.query_one(ChatPane)
        await ask(pilot, "one")
        assert pane.border_title is not None
        assert str(pane.border_title).endswith(" · ctx 3.1k/8k 38%")
        assert "older" not in shown(app) and "oldest" not in shown(app)
        await ask(pilot, "two")
        assert str(pane.border_title).endswith(" · ctx 7.5k/8k 92%")
        assert "This conversation fills 92% of the model's context (7,501 of 8,192" in shown(app)


async def test_ctrl_o_for_conversations_is_in_the_chats_footer_at_120_columns(
    fake: FakeOllama, tmp_path: Path
) -> None:
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await settled(app)
        keys = [k for k in app.screen.query(Key) if k.description == "Conversations"]
        assert len(keys) == 1 and keys[0].region.width > 0
        assert keys[0].region.right <= 120 and keys[0].key_display == "^o"
