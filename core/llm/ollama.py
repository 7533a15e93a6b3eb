"""Talking to Ollama: where it is, explicit timeouts, and what each failure means to a person."""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from ..config.settings import DEFAULT_OLLAMA_PORT, ConfigError, LLMSettings, ollama_url
from ..models import ErrorCode

# The ollama package makes a client at import, from OLLAMA_HOST, and raises if that is not an
# address. diana gives every client its host itself (resolve_host says what is wrong with a
# bad one), so the variable is kept from that import.
_host, os.environ["OLLAMA_HOST"] = os.environ.get("OLLAMA_HOST"), ""
try:
    import ollama
finally:
    if _host is None:
        del os.environ["OLLAMA_HOST"]
    else:
        os.environ["OLLAMA_HOST"] = _host

DEFAULT_HOST = f"http://127.0.0.1:{DEFAULT_OLLAMA_PORT}"
RETRIES = 2  # transient failures are tried again twice
RETRY_DELAYS = (0.5, 1.0)
STATUS_TIMEOUT = 3.0

T = TypeVar("T")


def resolve_host(configured: str | None) -> str:
    """settings.json's llm.host (checked when it was read), else OLLAMA_HOST, else the local
    default; always a full URL. ConfigError naming OLLAMA_HOST when that is not an address."""
    if configured and configured.strip():
        return ollama_url(configured)
    raw = os.environ.get("OLLAMA_HOST", "").strip()
    if not raw:
        return DEFAULT_HOST
    try:
        return ollama_url(raw)
    except ValueError as exc:
        raise ConfigError("the environment variable OLLAMA_HOST", str(exc)) from None


def make_client(host: str, settings: LLMSettings) -> ollama.AsyncClient:
    """The ollama client waits forever by default; ours gives up after the configured times."""
    timeout = httpx.Timeout(settings.timeout, connect=settings.connect_timeout)
    trusted = _tls(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return ollama.AsyncClient(host=host, timeout=timeout, verify=trusted)


@functools.cache
def _tls(_cert_file: str | None, _cert_dir: str | None) -> ssl.SSLContext:
    """httpx's own TLS context (certifi's certificates, or those $SSL_CERT_FILE or
    $SSL_CERT_DIR name), made once per process rather than by every client: making one
    reads every certificate, which takes longer than a chat's first token on loopback."""
    return httpx.create_ssl_context()


class LLMProblem(Exception):
    """Ollama could not answer; the message says what is wrong and what to do."""

    def __init__(
        self, code: ErrorCode, message: str, *, transient: bool = False, unreachable: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.transient = transient
        self.unreachable = unreachable  # nothing answered at the host at all


def explain(exc: BaseException, *, host: str, model: str, waited: float) -> LLMProblem:
    """Turn whatever the client raised into one clear sentence."""
    if isinstance(exc, LLMProblem):
        return exc
    if isinstance(exc, httpx.TimeoutException):
        if isinstance(exc, httpx.ConnectTimeout):
            return _unreachable(host)
        return LLMProblem(
            ErrorCode.NETWORK_TIMEOUT,
            f"Ollama at {host} did not answer within {waited:g} s — it may still be loading "
            f'"{model}" or be stuck; check "ollama ps", or raise llm.timeout in settings.json',
        )
    if isinstance(exc, httpx.ConnectError | ConnectionError):
        return _unreachable(host)
    if isinstance(exc, ollama.ResponseError):
        text = str(exc.error).strip()
        lowered = text.lower()
        if exc.status_code == 404 and "not found" in lowered:
            return LLMProblem(
                ErrorCode.MODEL_NOT_FOUND,
                f'model "{model}" is not installed — "ollama pull {model}"',
            )
        if "does not support thinking" in lowered:
            return LLMProblem(
                ErrorCode.INVALID_RESPONSE,
                f'model "{model}" does not think — turn thinking off, or choose another model',
            )
        if "does not support tools" in lowered:
            return LLMProblem(
                ErrorCode.INVALID_RESPONSE,
                f'model "{model}" cannot call tools — choose a model that can',
            )
        status = f" (HTTP {exc.status_code})" if exc.status_code > 0 else ""
        transient = exc.status_code < 0 or exc.status_code >= 500 or exc.status_code == 429
        return LLMProblem(
            ErrorCode.OLLAMA_UNAVAILABLE if transient else ErrorCode.INVALID_RESPONSE,
            f"Ollama at {host} reported an error{status}: {text}",
            transient=transient,
        )
    if isinstance(exc, httpx.TransportError):  # reset or cut off mid-answer
        return LLMProblem(
            ErrorCode.OLLAMA_UNAVAILABLE,
            f"the connection to Ollama at {host} broke: {type(exc).__name__}",
            transient=True,
        )
    if isinstance(exc, ValueError):  # a line that is not JSON, or not a chat response
        return LLMProblem(
            ErrorCode.INVALID_RESPONSE, f"Ollama at {host} sent a malformed answer: {exc}"
        )
    return LLMProblem(ErrorCode.INVALID_RESPONSE, f"{type(exc).__name__}: {exc}")


def _unreachable(host: str) -> LLMProblem:
    return LLMProblem(
        ErrorCode.OLLAMA_UNAVAILABLE,
        f'Ollama is not reachable at {host} — start it with "ollama serve"',
        unreachable=True,
    )


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    describe: Callable[[BaseException], LLMProblem],
    *,
    on_retry: Callable[[int, LLMProblem], Awaitable[None]] | None = None,
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> T:
    """Run ``attempt``; a transient failure is tried again (twice), anything else is raised
    at once as an LLMProblem."""
    for number in range(RETRIES + 1):
        try:
            return await attempt()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            problem = describe(exc)
            if not problem.transient or number == RETRIES:
                raise problem from None
            if on_retry is not None:
                await on_retry(number + 1, problem)
            await asyncio.sleep(delays[min(number, len(delays) - 1)])
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class OllamaStatus:
    host: str
    reachable: bool
    models: list[str] = field(default_factory=list)
    problem: str | None = None

    def has(self, model: str) -> bool:
        """Whether the model is installed; "name" and "name:latest" are the same model."""
        wanted = model if ":" in model else f"{model}:latest"
        return any(m == model or m == wanted for m in self.models)

    def after(self, model: str, problem: LLMProblem | None) -> OllamaStatus:
        """What a request to ``model`` says of Ollama: an answer means it is there with the
        model; a failure to reach it, or a model it does not have, says that instead."""
        others = [m for m in self.models if not OllamaStatus(self.host, True, [m]).has(model)]
        if problem is None:
            return OllamaStatus(self.host, True, sorted({*self.models, model}))
        if problem.unreachable:
            return OllamaStatus(self.host, False, problem=problem.message)
        if problem.code is ErrorCode.MODEL_NOT_FOUND:
            return OllamaStatus(self.host, True, others)
        return self  # an error from a running Ollama says nothing of what it has


async def check(client: ollama.AsyncClient, host: str, model: str) -> OllamaStatus:
    """Is Ollama there, and which models does it have? Never raises."""
    try:
        async with asyncio.timeout(STATUS_TIMEOUT):
            listed = await client.list()
    except TimeoutError:
        return OllamaStatus(
            host, False, problem=f"Ollama at {host} did not answer within {STATUS_TIMEOUT:g} s"
        )
    except Exception as exc:
        return OllamaStatus(
            host, False, problem=explain(exc, host=host, model=model, waited=STATUS_TIMEOUT).message
        )
    names = sorted(m.model for m in listed.models if m.model)
    return OllamaStatus(host, True, names)
