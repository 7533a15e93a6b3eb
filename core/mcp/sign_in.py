"""One HTTP server's OAuth sign-in across its connection's attempts: whether a person asked
for it (only then may a browser open), who is told the authorization URL, and the step-up an
attempt refused (the server wanted more scope than it was granted mid-session)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx2

from ..config.mcp_servers import MCPServerConfig
from .oauth import SignInNeeded


class SignIn:
    """The sign-in of one server; its tokens live under ``data_dir`` (None: no OAuth).
    ``on_step_up`` is told a refused step-up, ``on_started`` the URL of a sign-in begun."""

    def __init__(
        self,
        data_dir: Path | None,
        *,
        on_step_up: Callable[[SignInNeeded], None],
        on_started: Callable[[str], None],
    ) -> None:
        self._data_dir = data_dir
        self.asked = False  # a person asked to sign in, for the next attempt
        self._tell_url: Callable[[str], None] | None = None
        # This attempt's server asked for more access than it was granted, and was refused.
        self.refused_step_up: SignInNeeded | None = None
        self._on_step_up = on_step_up
        self._on_started = on_started

    def ask(self, show_url: Callable[[str], None] | None) -> None:
        """A person asks to sign in (``show_url`` is told the authorization URL)."""
        self.asked = True
        self._tell_url = show_url

    def tell(self, url: str) -> None:
        """Give the authorization URL to whoever asked, to offer when no browser opens."""
        if self._tell_url is not None:
            self._tell_url(url)

    def auth(self, config: MCPServerConfig) -> httpx2.Auth | None:
        """The server's OAuth for this attempt: made anew each time, so tokens another
        process obtained (`diana login`) are read from their file."""
        if self._data_dir is None:
            return None
        from .oauth import oauth_for

        return oauth_for(
            config,
            self._data_dir,
            allowed=self._may_open_browser,
            show_url=self._on_started,
            asked=self.asked,
        )

    def _may_open_browser(self, refusal: SignInNeeded) -> bool:
        """Only a person opens a sign-in. Refused mid-session (the server wants more scope
        than it was granted), what it wants is why the connection ends, not "closed"."""
        if self.asked:
            return True
        if refusal.more_scope is not None:
            self.refused_step_up = refusal
            self._on_step_up(refusal)
        return False
