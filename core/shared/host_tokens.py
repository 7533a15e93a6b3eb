"""The bearer tokens of the hosts that reach `diana serve --http`: one per named client, shown
once when it is made and kept only as its SHA-256 (a copy of the file lets no one in), in
``host-tokens.json`` in the data dir (0600). A request's token names its client: the name a
host gives itself in clientInfo never does over HTTP, so no host can pass for another."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..system.files import UnreadableFile, changing, read_regular, write_private

TOKENS_FILE = "host-tokens.json"
TOKENS_LIMIT = 1 << 20  # bytes of the file read at most
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TOKEN_PREFIX = "diana_"  # so a token pasted somewhere is recognisable as diana's


class TokenError(ValueError):
    """A name or a tokens file that cannot be used: the message says which and why."""


@dataclass(frozen=True)
class HostToken:
    name: str
    created: str  # when it was made, as shown


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class HostTokens:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / TOKENS_FILE

    def _read(self) -> dict[str, dict[str, str]]:
        if not self.path.exists() and not self.path.is_symlink():
            return {}
        try:
            raw = json.loads(read_regular(self.path, TOKENS_LIMIT, "the host tokens file"))
        except UnreadableFile as exc:
            raise TokenError(str(exc)) from None
        except ValueError as exc:
            raise TokenError(f"{self.path} is not JSON: {exc}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("created"), str)
            for entry in raw.values()
        ):
            raise TokenError(f"{self.path} is not diana's host tokens file")
        return raw

    def add(self, name: str, now: datetime) -> str:
        """A new token for client ``name``, to be shown once; TokenError for a bad or taken
        name."""
        if NAME.fullmatch(name) is None:
            raise TokenError(
                f"{name!r} cannot name a client: 1 to 64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        with changing(self.path):  # another `diana serve token` at once loses nothing
            tokens = self._read()
            if name in tokens:
                raise TokenError(
                    f"a client named {name} has a token already (`diana serve token remove "
                    f"{name}` first)"
                )
            token = TOKEN_PREFIX + secrets.token_urlsafe(32)
            tokens[name] = {"sha256": _digest(token), "created": f"{now:%Y-%m-%d %H:%M:%S}"}
            write_private(self.path, json.dumps(tokens, indent=2) + "\n")
        return token

    def listed(self) -> list[HostToken]:
        return [HostToken(name, entry["created"]) for name, entry in sorted(self._read().items())]

    def remove(self, name: str) -> bool:
        with changing(self.path):
            tokens = self._read()
            if tokens.pop(name, None) is None:
                return False
            write_private(self.path, json.dumps(tokens, indent=2) + "\n")
        return True

    def client_of(self, token: str) -> str | None:
        """The client a presented token belongs to, or None. Read afresh at each request, so
        a token removed meanwhile is refused at once; compared in constant time."""
        try:
            tokens = self._read()
        except TokenError:
            return None  # a file that cannot be read lets no one in
        presented = _digest(token)
        found = None
        for name, entry in tokens.items():
            if hmac.compare_digest(entry["sha256"], presented):
                found = name
        return found
