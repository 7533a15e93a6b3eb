"""Pictures a person attaches to a question (`/image PATH`, a pasted or dropped path,
`diana ask --image PATH`): read from a file that must be a readable regular file of at most
IMAGE_LIMIT bytes whose first bytes say PNG, JPEG, GIF or WebP, whatever its name says. A
FIFO is never waited on, a device or a link to one never read, nothing past the limit read
(``read_regular``). An image is kept with its question in the conversation (name, type, size
and its bytes in base64), shown as one line, and sent to the model in Ollama's ``images``
field with that question on every later turn, as Ollama's own clients do."""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ..content.text import printable, size_text
from ..system.files import UnreadableFile, read_regular

IMAGE_LIMIT = 20 << 20  # bytes of one image
IMAGES_PER_MESSAGE = 8
KINDS = "PNG, JPEG, GIF or WebP"
# What a dropped path may carry: quotes around it, a file:// URL, backslashes before spaces.
_ESCAPED = re.compile(r"\\(.)")


class BadImage(ValueError):
    """An image that cannot go with a question; the message names it and why, in one line."""


@dataclass(frozen=True)
class Image:
    """One picture that goes with a question."""

    name: str  # the file's name as shown: printable, bytes that are not UTF-8 as U+FFFD
    mime: str
    size: int
    data: bytes

    @property
    def shown(self) -> str:
        """The transcript's line for it: ``📷 cat.png (12.3 KiB)``."""
        return f"📷 {self.name} ({size_text(self.size)})"

    def for_model(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def stored(self) -> dict[str, Any]:
        """As the conversation keeps it (the question's ``data``)."""
        return {"name": self.name, "mime": self.mime, "size": self.size, "data": self.for_model()}

    def described(self) -> dict[str, Any]:
        """What an export says of it: everything but its bytes."""
        return {"name": self.name, "mime": self.mime, "size": self.size}


def image_kind(head: bytes) -> str | None:
    """The type the first bytes of a file say it is, if one of the images a model takes."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as a message may name it: one printable line, a name that is not UTF-8 with
    U+FFFD for its bad bytes."""
    text = os.fsencode(path).decode("utf-8", "replace")
    return printable(text, multiline=False)


def read_image(path: str | os.PathLike[str]) -> Image:
    """The picture at ``path`` (``~`` is the home folder); BadImage saying why otherwise."""
    where = Path(os.path.expanduser(os.fspath(path)))
    named = shown_path(path)
    if not os.fspath(path).strip():
        raise BadImage("an image needs a path: /image PATH")
    try:
        data = read_regular(where, IMAGE_LIMIT, "an image")
    except UnreadableFile as exc:
        raise BadImage(f"image {named} {exc.reason}") from None
    kind = image_kind(data[:16])
    if kind is None:
        what = "is empty" if not data else "is not an image"
        raise BadImage(f"image {named} {what}: diana takes {KINDS} pictures (by their content)")
    return Image(shown_path(where.name), kind, len(data), data)


def read_images(paths: list[str]) -> list[Image]:
    """Every picture named, in order; BadImage for the first that cannot go, or too many."""
    if len(paths) > IMAGES_PER_MESSAGE:
        raise BadImage(
            f"at most {IMAGES_PER_MESSAGE} images go with one question, not {len(paths)}"
        )
    return [read_image(path) for path in paths]


def stored_images(data: Any) -> list[Image]:
    """The pictures a stored question kept (its ``data``); any entry damaged is left out."""
    entries = data.get("images") if isinstance(data, dict) else None
    images = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("data"), str):
            continue
        try:
            raw = base64.b64decode(entry["data"], validate=True)
        except (binascii.Error, ValueError):
            continue
        name = entry.get("name")
        images.append(
            Image(
                printable(name, multiline=False) if isinstance(name, str) else "image",
                str(entry.get("mime") or image_kind(raw[:16]) or "image"),
                len(raw),
                raw,
            )
        )
    return images


def image_payloads(data: Any) -> list[str]:
    """What a stored question sends the model in ``images``: each kept picture's base64."""
    entries = data.get("images") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [e["data"] for e in entries if isinstance(e, dict) and isinstance(e.get("data"), str)]


def dropped_path(text: str) -> Path | None:
    """The file a pasted or dropped text names, if the whole text is one path to an existing
    picture (quoted, a ``file://`` URL, or with backslashes before spaces as terminals drop
    it); None otherwise (the text is a message)."""
    text = text.strip()
    if not text or "\n" in text or len(text) > 4096:
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    elif "\\" in text:
        text = _ESCAPED.sub(r"\1", text)
    if not text.startswith(("/", "~")):
        return None
    path = Path(os.path.expanduser(text))
    try:
        data = _head(path)
    except OSError:
        return None
    return path if data is not None and image_kind(data) is not None else None


def _head(path: Path) -> bytes | None:
    """The first bytes of the regular file at ``path`` (never a FIFO, never waited on)."""
    import stat

    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 16)
    finally:
        os.close(fd)


def no_vision_text(model: str, takers: list[str]) -> str:
    """Why an image is refused before anything is sent: the model, and which take images."""
    others = (
        f"installed models that take images: {', '.join(takers)} (/model NAME)"
        if takers
        else "no installed model takes images (e.g. diana models pull gemma3)"
    )
    return f'model "{model}" does not take images — {others}'
