"""The models Ollama has: what each is (size, family, quantisation, context length), what it
can do (tools, vision, thinking, embedding, completion), which are loaded; pulling one with
its progress, and removing one. Capabilities come from ``/api/show``, asked once per model
digest and kept for the session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..models import ErrorCode
from .ollama import STATUS_TIMEOUT, LLMProblem, explain, ollama

CAPABILITIES = ("completion", "tools", "vision", "thinking", "embedding")


@dataclass(frozen=True)
class ModelInfo:
    """One installed model, as Ollama describes it."""

    name: str
    digest: str = ""
    size: int = 0  # bytes on disk
    family: str = ""
    parameter_size: str = ""
    quantization: str = ""
    context_length: int | None = None
    capabilities: tuple[str, ...] | None = None  # None: Ollama could not say
    loaded: bool = False
    modified_at: str = ""

    def can(self, capability: str) -> bool:
        return self.capabilities is not None and capability in self.capabilities

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "digest": self.digest,
            "size": self.size,
            "family": self.family,
            "parameter_size": self.parameter_size,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "capabilities": None if self.capabilities is None else list(self.capabilities),
            "loaded": self.loaded,
            "modified_at": self.modified_at,
        }


@dataclass(frozen=True)
class PullProgress:
    """One step of a pull, as Ollama streams it."""

    status: str
    completed: int | None = None
    total: int | None = None
    digest: str = ""

    @property
    def percent(self) -> float | None:
        if not self.total or self.completed is None:
            return None
        return min(100.0, 100.0 * self.completed / self.total)

    @property
    def done(self) -> bool:
        return self.status == "success"

    def describe(self) -> str:
        percent = self.percent
        return self.status if percent is None else f"{self.status} {percent:.0f}%"


@dataclass
class _Shown:
    capabilities: tuple[str, ...]
    context_length: int | None


@dataclass
class Models:
    """Ollama's models, through the chat's client. What ``/api/show`` said of a digest is
    kept in memory: a model is shown once, until it is pulled again (a new digest)."""

    client: ollama.AsyncClient
    host: str
    _shown: dict[str, _Shown] = field(default_factory=dict)  # by digest
    _digests: dict[str, str] = field(default_factory=dict)  # name -> digest, last listed

    def problem(self, exc: BaseException, model: str = "") -> LLMProblem:
        """One sentence for what went wrong talking to Ollama about ``model``."""
        if isinstance(exc, ollama.ResponseError) and model:
            text = " ".join(str(exc.error).split())
            if exc.status_code == 404 or "not found" in text.lower():
                return LLMProblem(
                    ErrorCode.MODEL_NOT_FOUND,
                    f'model "{model}" is not installed — "diana models pull {model}"',
                )
        return explain(exc, host=self.host, model=model, waited=0)

    async def installed(self) -> list[ModelInfo]:
        """Every installed model, its capabilities and whether it is loaded, by name."""
        try:
            listed, running = await asyncio.gather(self.client.list(), self.client.ps())
        except Exception as exc:
            raise self.problem(exc) from None
        loaded = {m.model for m in running.models if m.model}
        self._digests = {m.model: m.digest or "" for m in listed.models if m.model}
        models = []
        for entry in sorted(listed.models, key=lambda m: m.model or ""):
            if not entry.model:
                continue
            shown = await self._show_cached(entry.model, entry.digest or "")
            details = entry.details
            models.append(
                ModelInfo(
                    name=entry.model,
                    digest=entry.digest or "",
                    size=int(entry.size or 0),
                    family=(details.family if details else None) or "",
                    parameter_size=(details.parameter_size if details else None) or "",
                    quantization=(details.quantization_level if details else None) or "",
                    context_length=None if shown is None else shown.context_length,
                    capabilities=None if shown is None else shown.capabilities,
                    loaded=entry.model in loaded,
                    modified_at=str(entry.modified_at or ""),
                )
            )
        return models

    async def show(self, name: str) -> ModelInfo:
        """One installed model; LLMProblem (MODEL_NOT_FOUND) if Ollama has no such model."""
        wanted = _full_name(name)
        for model in await self.installed():
            if model.name in (name, wanted):
                return model
        raise LLMProblem(
            ErrorCode.MODEL_NOT_FOUND,
            f'model "{name}" is not installed — "diana models pull {name}"',
        )

    async def capabilities(self, name: str) -> tuple[str, ...] | None:
        """What ``name`` can do, or None when Ollama cannot say within STATUS_TIMEOUT (then
        nothing is withheld, and the request that follows says what is wrong)."""
        try:
            async with asyncio.timeout(STATUS_TIMEOUT):
                return await self._capabilities(name)
        except Exception:
            return None

    async def context_length(self, name: str) -> int | None:
        """How many tokens ``name`` takes in (/api/show's ``<family>.context_length``), or
        None when Ollama cannot say within STATUS_TIMEOUT."""
        try:
            async with asyncio.timeout(STATUS_TIMEOUT):
                shown = await self._shown_for(name)
        except Exception:
            return None
        return None if shown is None else shown.context_length

    async def _capabilities(self, name: str) -> tuple[str, ...] | None:
        shown = await self._shown_for(name)
        return None if shown is None else shown.capabilities

    async def _shown_for(self, name: str) -> _Shown | None:
        digest = self._digests.get(name) or self._digests.get(_full_name(name))
        if digest is None:
            listed = await self.client.list()
            self._digests = {m.model: m.digest or "" for m in listed.models if m.model}
            digest = self._digests.get(name) or self._digests.get(_full_name(name))
        if digest is None:
            return None
        return await self._show_cached(name, digest)

    async def _show_cached(self, name: str, digest: str) -> _Shown | None:
        if digest and digest in self._shown:
            return self._shown[digest]
        try:
            answer = await self.client.show(name)
        except ollama.ResponseError:
            return None  # listed but not shown (removed meanwhile): capabilities unknown
        except Exception as exc:
            raise self.problem(exc, name) from None
        shown = _Shown(
            tuple(c for c in (answer.capabilities or []) if isinstance(c, str)),
            _context_length(answer.modelinfo or {}),
        )
        if digest:
            self._shown[digest] = shown
        return shown

    def forget(self, name: str) -> None:
        """``name`` changed (pulled or removed): list it again when next asked."""
        self._digests.pop(name, None)
        self._digests.pop(_full_name(name), None)

    async def pull(self, name: str) -> AsyncIterator[PullProgress]:
        """Pull ``name``, step by step. Cancelling the iteration stops the download; pulling
        again continues it (Ollama keeps what it has). Raises LLMProblem in one line."""
        name = name.strip()
        if not name or any(c.isspace() for c in name):
            raise LLMProblem(ErrorCode.INVALID_ARGUMENTS, f"not a model name: {name!r}")
        self.forget(name)
        try:
            stream = await self.client.pull(name, stream=True)
            async for step in stream:
                yield PullProgress(
                    str(step.status or ""),
                    step.completed,
                    step.total,
                    step.digest or "",
                )
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except ollama.ResponseError as exc:
            text = " ".join(str(exc.error).split())
            raise LLMProblem(
                ErrorCode.MODEL_NOT_FOUND
                if "does not exist" in text or "not found" in text
                else ErrorCode.INVALID_RESPONSE,
                f'Ollama could not pull "{name}": {text}',
            ) from None
        except (httpx.TransportError, ConnectionError) as exc:
            if isinstance(exc, httpx.ConnectError | ConnectionError):
                raise self.problem(exc, name) from None
            raise LLMProblem(
                ErrorCode.OLLAMA_UNAVAILABLE,
                f'the pull of "{name}" broke off ({type(exc).__name__}) — pull it again to '
                "continue: Ollama keeps what it has downloaded",
                transient=True,
            ) from None
        except Exception as exc:
            raise self.problem(exc, name) from None
        finally:
            self.forget(name)

    async def remove(self, name: str) -> None:
        """Delete ``name`` from Ollama; LLMProblem (MODEL_NOT_FOUND) if it has no such model."""
        try:
            await self.client.delete(name)
        except Exception as exc:
            raise self.problem(exc, name) from None
        finally:
            self.forget(name)


def capabilities_text(model: ModelInfo) -> str:
    """The capabilities worth naming (every chat model completes): "tools,vision", or "?"."""
    if model.capabilities is None:
        return "?"
    named = [c for c in model.capabilities if c != "completion"]
    return ",".join(named) or "-"


def size_text(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def context_text(length: int | None) -> str:
    if length is None:
        return "?"
    return f"{length // 1024}k" if length >= 1024 and length % 1024 == 0 else str(length)


def _full_name(name: str) -> str:
    """As Ollama reads it, a name without a tag means its "latest" tag."""
    return name if ":" in name else f"{name}:latest"


def _context_length(info: Mapping[str, Any]) -> int | None:
    """``<family>.context_length`` of /api/show's model_info."""
    family = info.get("general.architecture")
    value = info.get(f"{family}.context_length") if isinstance(family, str) else None
    if value is None:
        value = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    return value if isinstance(value, int) and value > 0 else None
