"""The files that keep what HTTP servers' OAuth sign-ins obtained: one per server under
``<data>/oauth/``, 0600. Each holds the server's URL, its tokens and their expiry, and a client
registration the authorization server gave (dynamic registration); never what is configured
(a configured client secret is read from mcp-servers.json each time it is needed).

Every token and client secret in them is a secret by value: whatever reads or writes one makes
it masked (telemetry's SECRET_VALUES) in this process from then on, and a runtime reads them
all when it opens, so no process shows one it did not obtain itself. No MCP SDK import here:
every command opens a runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..system.files import write_private
from ..system.telemetry import SECRET_VALUES

OAUTH_DIR = "oauth"
# What in a token file is a secret, by the entry that holds it.
SECRET_FIELDS = {
    "tokens": ("access_token", "refresh_token", "id_token"),
    "client": ("client_secret", "registration_access_token"),
}


def token_file(data_dir: Path, server: str) -> Path:
    return data_dir / OAUTH_DIR / f"{server}.json"


def secrets_in(kept: dict[str, Any]) -> list[str]:
    """The tokens and client secrets in a token file's content."""
    found: list[str] = []
    for entry, names in SECRET_FIELDS.items():
        values = kept.get(entry)
        if isinstance(values, dict):
            found += [v for name in names if isinstance(v := values.get(name), str)]
    return found


def read_kept(path: Path) -> dict[str, Any]:
    """A token file's content ({} if there is none or it cannot be read), its secrets
    masked from now on."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(kept, dict):
        return {}
    SECRET_VALUES.remember(secrets_in(kept))
    return kept


def write_kept(path: Path, kept: dict[str, Any]) -> None:
    """Replace a token file's content; its secrets are masked before anything could show them."""
    SECRET_VALUES.remember(secrets_in(kept))
    write_private(path, json.dumps(kept, indent=2))


def remember_kept_tokens(data_dir: Path) -> None:
    """Mask every token and client secret kept under ``data_dir`` in this process, whichever
    server and process obtained it."""
    try:
        paths = sorted((data_dir / OAUTH_DIR).glob("*.json"))
    except OSError:
        return
    for path in paths:
        read_kept(path)


def forget(data_dir: Path, server: str) -> bool:
    """Sign out: remove the server's tokens and registration. Whether there were any."""
    path = token_file(data_dir, server)
    kept = read_kept(path)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return "tokens" in kept
