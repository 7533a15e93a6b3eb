"""The key that signs proposals, kept in a file beside the database (not in it): what binds
an approval to the call a person saw, and tells a key that is gone from a call that changed."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from ..storage.db import StorageError
from ..system.files import UnreadableFile, read_regular
from .proposal import Proposal

KEY_FILE = "proposals.key"  # beside the database; signs each proposal's call
KEY_BYTES = 32
KEY_ID_LENGTH = 16  # hex characters of the signing key's fingerprint, before each digest
TAMPERED = "its tool, agent or arguments were changed after it was proposed"
UNSIGNED = "it was made by an older diana and cannot be checked: make the call again"
KEY_GONE = "the proposal key is gone; this proposal cannot be verified, so it never runs"


def signing_key(directory: Path) -> bytes:
    """The key that signs proposals, made once per data dir (readable by its owner only) by
    whichever process comes first; every process then reads the same key."""
    path = directory / KEY_FILE
    if not os.path.lexists(path):
        directory.mkdir(parents=True, exist_ok=True)
        staged = directory / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(staged, path)  # atomic, and never replaces a key another process made
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    try:
        key = read_regular(path, KEY_BYTES, "a proposal key")
    except UnreadableFile as exc:
        raise StorageError(
            f"the proposal key {path} {exc.reason}; move it aside (pending proposals will "
            "then have to be made again)"
        ) from None
    if len(key) != KEY_BYTES:
        raise StorageError(
            f"{path} is not a proposal key ({len(key)} bytes, not {KEY_BYTES}); move it aside "
            "(pending proposals will then have to be made again)"
        )
    return key


class ProposalKey:
    """The signing key as its file holds it now: read again when the file changes, and made
    anew when it is gone, so every process signs new proposals with the one key on disk (a
    process holding a deleted key in memory would sign what no other process can check)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: tuple[int, int, int, int] | None = None
        self._key = b""

    def current(self) -> bytes:
        seen = self._stamp()
        if seen is None or seen != self._seen:
            self._key = signing_key(self.directory)
            self._seen = self._stamp()
        return self._key

    def _stamp(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.directory / KEY_FILE)
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def key_id(key: bytes) -> str:
    """The fingerprint of a signing key: which key signed a proposal, without the key."""
    return hashlib.sha256(b"diana proposal key\0" + key).hexdigest()[:KEY_ID_LENGTH]


def _signature(
    key: bytes, tool: str, agent: str | None, arguments: Any, program: str | None = None
) -> str:
    signed = [tool, agent, arguments] if program is None else [tool, agent, arguments, program]
    canonical = json.dumps(signed, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hmac.new(key, canonical.encode(), "sha256").hexdigest()


def call_digest(
    key: bytes, tool: str, agent: str | None, arguments: Any, program: str | None = None
) -> str:
    """The signed digest of one call: what an approval is bound to, after the fingerprint of
    the key that signed it (so a key that is gone is told from a call that changed).
    ``program``: the launch identity of the MCP server whose tool it is, if recorded."""
    return f"{key_id(key)}:{_signature(key, tool, agent, arguments, program)}"


def unverified(key: bytes, proposal: Proposal) -> str | None:
    """Why the proposal's call cannot be trusted to be the one proposed; None if it can."""
    digest = proposal.digest
    if not isinstance(digest, str):
        return UNSIGNED if digest is None else TAMPERED
    signer, marked, _ = digest.rpartition(":")
    if marked and signer != key_id(key):
        return KEY_GONE
    program = proposal.server_identity
    expected = (
        call_digest(key, proposal.tool, proposal.agent, proposal.arguments, program)
        if marked
        else _signature(key, proposal.tool, proposal.agent, proposal.arguments)  # older diana
    )
    return None if hmac.compare_digest(expected.encode(), digest.encode()) else TAMPERED


def key_gone(signer: str, proposal: Proposal) -> bool:
    """Whether the proposal was signed by another key than the one whose fingerprint is
    ``signer`` (the one on disk now)."""
    digest = proposal.digest
    if not isinstance(digest, str):
        return False
    signed_by, marked, _ = digest.rpartition(":")
    return bool(marked) and signed_by != signer
