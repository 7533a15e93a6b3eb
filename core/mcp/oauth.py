"""Signing in to HTTP servers that ask for OAuth 2.1, through the SDK's providers.

The SDK does the protocol: on a 401 it discovers the protected resource's and authorization
server's metadata, registers (dynamic registration, a client ID metadata document, or the
configured client), authorises with PKCE, steps up its scope on a 403, and refreshes tokens
before they expire. diana supplies what is the host's:

- where tokens live: one file per server under ``<data>/oauth/``, mode 0600 (core/mcp/
  tokens.py), every token in it masked wherever it could be shown; tokens obtained for another
  URL are not used; a configured client is read from the config at each connection, never
  copied there;
- the person: a browser is opened only when a sign-in was asked for (a key in the MCP Servers
  pane, or `diana login`); otherwise the server is "sign-in needed" and is not retried. A
  server that asks for more scope mid-session (a 403 ``insufficient_scope``) is told the
  same way: the scope it wanted is kept with its tokens, and the next sign-in a person asks
  for authorises anew for what was granted and that scope together;
- the redirect back: a one-shot listener on 127.0.0.1.

Machine servers use the client-credentials grant, with a secret or a signed JWT, and need no
person at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning

from ..config.mcp_servers import AuthConfig, MCPServerConfig
from .tokens import forget, read_kept, token_file, write_kept

__all__ = ["BrowserSignIn", "SignInFailed", "SignInNeeded", "TokenFile", "forget", "oauth_for"]

SIGN_IN_TIME = 300.0  # seconds a person has to finish signing in, in the browser
REFRESH_MARGIN = 30.0  # seconds before expiry at which a stored access token is refreshed
CALLBACK_PATH = "/callback"
CLIENT_NAME = "diana"


class SignInNeeded(Exception):
    """The server wants a person to sign in, and no one asked to. ``more_scope``: it was
    signed in, and wants access it was not granted (a step-up)."""

    def __init__(self, server: str, more_scope: str | None = None) -> None:
        what = "sign-in needed"
        if more_scope is not None:
            what = f"needs more access (scope {more_scope}) than it was granted"
        super().__init__(f"{what}: press i on it in MCP Servers, or run `diana login {server}`")
        self.server = server
        self.more_scope = more_scope


class SignInFailed(Exception):
    """The browser came back without a code; the message says what the server said."""


class TokenFile(TokenStorage):
    """A server's tokens and the client the authorization server registered, in one file
    only its owner may read. What was obtained for another URL is not handed out (the server
    entry changed). A ``configured`` client (mcp-servers.json names its client_id) is handed
    out as configured now and never written: a rotated secret is used at the next token
    request."""

    def __init__(
        self, path: Path, url: str, configured: OAuthClientInformationFull | None = None
    ) -> None:
        self.path = path
        self.url = url
        self.configured = configured
        # A person asked to sign in: tokens granted less than the server wanted are not
        # handed out, so the SDK authorises anew (for the wider scope).
        self.widen = False

    def wanted_scope(self) -> str | None:
        """The scope the server asked for beyond what its tokens were granted, if it did."""
        wanted = self.stored().get("wanted_scope")
        return wanted if isinstance(wanted, str) and wanted else None

    def granted_scope(self) -> str | None:
        tokens = self.stored().get("tokens")
        scope = tokens.get("scope") if isinstance(tokens, dict) else None
        return scope if isinstance(scope, str) else None

    def stored(self) -> dict[str, Any]:
        stored = read_kept(self.path)
        return stored if stored.get("url") == self.url else {}

    def put(self, key: str, value: Any) -> None:
        stored = self.stored()
        stored.update({"url": self.url, key: value})
        write_kept(self.path, stored)

    def drop_configured_client(self) -> None:
        """Remove a copy of the configured client an older diana kept with the tokens."""
        stored = self.stored()
        client = stored.get("client")
        if self.configured is not None and isinstance(client, dict):
            if client.get("client_id") == self.configured.client_id:
                del stored["client"]
                write_kept(self.path, stored)

    async def get_tokens(self) -> OAuthToken | None:
        """The tokens, their lifetime counted from now (less a margin: an access token
        about to expire is refreshed before it is used)."""
        stored = self.stored()
        found = stored.get("tokens")
        if self.widen and self.wanted_scope() is not None:
            return None
        try:
            tokens = None if found is None else OAuthToken.model_validate(found)
        except ValueError:
            return None
        expires_at = stored.get("expires_at")
        if tokens is not None and isinstance(expires_at, int | float):
            left = int(expires_at - time.time() - REFRESH_MARGIN)
            tokens = tokens.model_copy(update={"expires_in": max(left, 0)})
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        stored = self.stored()
        stored.update(
            {"url": self.url, "tokens": tokens.model_dump(mode="json", exclude_none=True)}
        )
        if tokens.expires_in is not None:
            stored["expires_at"] = time.time() + tokens.expires_in
        if covers(tokens.scope, stored.get("wanted_scope")):
            stored.pop("wanted_scope", None)
        write_kept(self.path, stored)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self.configured is not None:
            return self.configured
        found = self.stored().get("client")
        try:
            return None if found is None else OAuthClientInformationFull.model_validate(found)
        except ValueError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.configured is not None and client_info.client_id == self.configured.client_id:
            return  # it is in the config, and is read from there
        self.put("client", client_info.model_dump(mode="json", exclude_none=True))

    def redirect_port(self) -> int | None:
        """The port of the redirect URI the client was registered with, if it was."""
        client = self.stored().get("client")
        uris = client.get("redirect_uris") if isinstance(client, dict) else None
        if not uris:
            return None
        parts = urlsplit(str(uris[0]))
        return parts.port if parts.hostname == "127.0.0.1" else None


def covers(granted: str | None, wanted: object) -> bool:
    """Whether a grant includes every scope wanted (nothing wanted: it does)."""
    if not isinstance(wanted, str):
        return True
    return set(wanted.split()) <= set((granted or "").split())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class BrowserSignIn:
    """The redirect and callback of the authorization-code flow: a listener on 127.0.0.1,
    the browser opened on the authorization URL (``$BROWSER`` is honoured), the code read
    from the redirect back. Refused (SignInNeeded) unless a sign-in was asked for."""

    def __init__(
        self,
        server: str,
        port: int,
        storage: TokenFile,
        allowed: Callable[[SignInNeeded], bool],
        show_url: Callable[[str], None],
    ) -> None:
        self.server = server
        self.port = port
        self._storage = storage
        self._allowed = allowed
        self._show_url = show_url
        self._listener: asyncio.Server | None = None
        self._answer: asyncio.Future[AuthorizationCodeResult] | None = None

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def redirect(self, authorization_url: str) -> None:
        refusal = SignInNeeded(self.server, self._step_up(authorization_url))
        if not self._allowed(refusal):
            raise refusal
        await self._close()
        self._answer = asyncio.get_running_loop().create_future()
        try:
            self._listener = await asyncio.start_server(self._on_visit, "127.0.0.1", self.port)
        except OSError as exc:
            raise SignInFailed(
                f"cannot listen on 127.0.0.1:{self.port} for the sign-in ({exc.strerror}); "
                f"`diana logout {self.server}` registers diana again on another port"
            ) from None
        self._show_url(authorization_url)
        from ..system.browser import open_url

        await open_url(authorization_url)

    def _step_up(self, authorization_url: str) -> str | None:
        """The scope a signed-in server asks for beyond its grant (kept with its tokens for
        the next sign-in), or None for a first sign-in."""
        asked = parse_qs(urlsplit(authorization_url).query).get("scope", [""])[0]
        granted = self._storage.granted_scope()
        if self._storage.stored().get("tokens") is None or covers(granted, asked):
            return None
        more = " ".join(s for s in asked.split() if s not in (granted or "").split())
        self._storage.put("wanted_scope", asked)
        return more

    async def callback(self) -> AuthorizationCodeResult:
        assert self._answer is not None
        try:
            async with asyncio.timeout(SIGN_IN_TIME):
                return await self._answer
        except TimeoutError:
            raise SignInFailed(f"the sign-in was not finished within {SIGN_IN_TIME:g} s") from None
        finally:
            await self._close()

    async def _close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
            with contextlib.suppress(Exception):
                await listener.wait_closed()

    async def _on_visit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = request.decode("latin-1").split()
            target = urlsplit(parts[1]) if len(parts) > 1 else None
            if target is None or target.path != CALLBACK_PATH:
                await _reply(writer, 404, "Not found.")
                return
            query = {k: v[0] for k, v in parse_qs(target.query).items()}
            answer = self._answer
            if "code" in query:
                result = AuthorizationCodeResult(
                    code=query["code"], state=query.get("state"), iss=query.get("iss")
                )
                await _reply(writer, 200, "Signed in to diana. You can close this tab.")
                if answer is not None and not answer.done():
                    answer.set_result(result)
                return
            said = query.get("error_description") or query.get("error") or "no code"
            await _reply(writer, 400, f"Sign-in failed: {said}")
            if answer is not None and not answer.done():
                answer.set_exception(SignInFailed(f"the authorization server said: {said}"))
        except (TimeoutError, OSError, UnicodeError):
            pass
        finally:
            writer.close()


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = f"<!doctype html><title>diana</title><p>{text}</p>".encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


class _StoredTokens(OAuthClientProvider):
    """The SDK's provider, told when tokens read from the file expire (it knows only of
    tokens it obtained itself), so another process's tokens are refreshed, not re-authorised;
    and asking, when it authorises, for the scope a server wanted beyond the last grant."""

    async def _initialize(self) -> None:
        await super()._initialize()
        tokens = self.context.current_tokens
        if tokens is not None and tokens.expires_in is not None:
            self.context.update_token_expiry(tokens)

    async def _perform_authorization(self) -> httpx2.Request:
        storage = self.context.storage
        wanted = storage.wanted_scope() if isinstance(storage, TokenFile) else None
        if wanted is not None:
            metadata = self.context.client_metadata
            asked = (metadata.scope or "").split()
            metadata.scope = " ".join(asked + [s for s in wanted.split() if s not in asked])
        return await super()._perform_authorization()


def oauth_for(
    config: MCPServerConfig,
    data_dir: Path,
    *,
    allowed: Callable[[SignInNeeded], bool],
    show_url: Callable[[str], None],
    asked: bool = False,
) -> httpx2.Auth:
    """The SDK provider that signs this server's requests (it does nothing until the server
    answers 401). ``asked``: a person asked to sign in, so a scope the server wanted beyond
    its grant is authorised now."""
    assert config.url is not None
    auth = config.auth or AuthConfig()
    storage = TokenFile(token_file(data_dir, config.name), config.url)
    storage.widen = asked
    with warnings.catch_warnings():  # no issuer configured: whichever discovery finds
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        if auth.grant == "client_credentials":
            # Signing keys need PyJWT and cryptography: imported by a server that uses them.
            from mcp.client.auth.extensions.client_credentials import (
                ClientCredentialsOAuthProvider,
                PrivateKeyJWTOAuthProvider,
                SignedJWTParameters,
            )

            assert auth.client_id is not None
            if auth.private_key_pem:
                signed = SignedJWTParameters(
                    issuer=auth.client_id,
                    subject=auth.client_id,
                    signing_key=auth.private_key_pem,
                    signing_algorithm=auth.signing_algorithm,
                )
                return PrivateKeyJWTOAuthProvider(
                    config.url,
                    storage,
                    auth.client_id,
                    signed.create_assertion_provider(),
                    scope=auth.scope,
                    issuer=auth.issuer,
                )
            assert auth.client_secret is not None
            return ClientCredentialsOAuthProvider(
                config.url,
                storage,
                auth.client_id,
                auth.client_secret,
                token_endpoint_auth_method=(
                    "client_secret_post"
                    if auth.token_endpoint_auth_method == "client_secret_post"
                    else "client_secret_basic"
                ),
                scope=auth.scope,
                issuer=auth.issuer,
            )
    port = storage.redirect_port() or _free_port()
    browser = BrowserSignIn(config.name, port, storage, allowed, show_url)
    if auth.client_id is not None:
        # A client registered beforehand, as configured now (a rotated secret included).
        method = auth.token_endpoint_auth_method or (
            "client_secret_basic" if auth.client_secret else "none"
        )
        storage.configured = OAuthClientInformationFull(
            client_id=auth.client_id,
            client_secret=auth.client_secret,
            redirect_uris=[browser.redirect_uri],  # type: ignore[list-item]
            token_endpoint_auth_method=method,
            scope=auth.scope,
        )
        storage.drop_configured_client()
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[browser.redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=auth.scope,
    )
    return _StoredTokens(
        config.url,
        metadata,
        storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
        client_metadata_url=auth.client_metadata_url,
    )
