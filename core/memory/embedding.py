"""Sentence vectors from Ollama's /api/embed, through the ollama client, in batches.

Some models want to be told whether a text is a question or a passage to be found
(`nomic-embed-text`: ``search_query: `` / ``search_document: ``); the prefix is added by
model name. Whatever goes wrong (Ollama down, the model not pulled, a model that does not
embed) is one EmbeddingUnavailable whose ``why`` a person can act on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from ..config.settings import ConfigError, LLMSettings

if TYPE_CHECKING:
    import ollama

DEFAULT_EMBED_MODEL = "all-minilm"
BATCH = 32  # texts per /api/embed request
MAX_DIMENSIONS = 16384  # numbers in one vector; more is no embedding model's answer
Role = Literal["query", "document"]

# Prefixes some embedding models were trained with, by model name (without its tag).
PREFIXES: dict[str, dict[Role, str]] = {
    "nomic-embed-text": {"query": "search_query: ", "document": "search_document: "},
    "mxbai-embed-large": {
        "query": "Represent this sentence for searching relevant passages: ",
        "document": "",
    },
}


def prefixed(model: str, role: Role, text: str) -> str:
    """``text`` as ``model`` wants it for ``role``."""
    base = model.split(":", 1)[0].rsplit("/", 1)[-1]
    return PREFIXES.get(base, {}).get(role, "") + text


class EmbeddingUnavailable(Exception):
    """No vector could be had; ``why`` says what is wrong and what to do."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Embedder(Protocol):
    model: str

    async def embed(self, texts: Sequence[str], role: Role) -> list[list[float]]:
        """One unit vector per text, in order. EmbeddingUnavailable if there is none."""
        ...

    async def close(self) -> None: ...


class OllamaEmbedder:
    """Vectors from Ollama's ``model`` (`AsyncClient.embed`, batched), at the host the chat
    uses (``configured``: settings.json's llm.host, else OLLAMA_HOST, else the local
    default). The ollama client is imported and made at the first request, so a command
    that never embeds never loads it."""

    def __init__(self, configured: str | None, model: str, settings: LLMSettings) -> None:
        self.configured = configured
        self.host = configured or ""
        self.model = model
        self._settings = settings
        self._client: ollama.AsyncClient | None = None

    def _connected(self) -> ollama.AsyncClient:
        if self._client is None:
            from ..llm.ollama import make_client, resolve_host

            try:
                self.host = resolve_host(self.configured)
            except ConfigError as exc:
                raise EmbeddingUnavailable(str(exc)) from None
            self._client = make_client(self.host, self._settings)
        return self._client

    async def embed(self, texts: Sequence[str], role: Role) -> list[list[float]]:
        vectors: list[list[float]] = []
        client = self._connected()
        for start in range(0, len(texts), BATCH):
            batch = [prefixed(self.model, role, t) for t in texts[start : start + BATCH]]
            try:
                reply = await client.embed(self.model, batch)
            except Exception as exc:
                raise EmbeddingUnavailable(self._why(exc)) from None
            if len(reply.embeddings) != len(batch):
                raise EmbeddingUnavailable(
                    f"Ollama at {self.host} gave {len(reply.embeddings)} vectors for "
                    f"{len(batch)} texts"
                )
            for vector in reply.embeddings:
                problem = vector_problem(vector)
                if problem is not None:
                    raise EmbeddingUnavailable(
                        f'Ollama at {self.host} gave embedding model "{self.model}" {problem}; '
                        "it is not stored, and is asked again later"
                    )
                vectors.append(unit(vector))
            lengths = {len(v) for v in vectors}
            if len(lengths) > 1:
                raise EmbeddingUnavailable(
                    f'Ollama at {self.host} gave embedding model "{self.model}" vectors of '
                    f"{len(lengths)} different lengths in one answer; none is stored"
                )
        return vectors

    def _why(self, exc: BaseException) -> str:
        from ..llm.ollama import explain

        text = explain(exc, host=self.host, model=self.model, waited=self._settings.timeout).message
        if "does not support" in text.lower():
            return f'model "{self.model}" does not embed text — choose another memory.embed_model'
        return text.replace(f'model "{self.model}"', f'embedding model "{self.model}"')

    async def close(self) -> None:
        if self._client is not None:
            await self._client._client.aclose()


def vector_problem(vector: Sequence[float]) -> str | None:
    """What makes ``vector`` no embedding (empty, too long, NaN or Infinity in it, all
    zeros, not numbers), in words; None if it is one."""
    if not vector:
        return "an empty vector"
    if len(vector) > MAX_DIMENSIONS:
        return f"a vector of {len(vector):,} numbers (at most {MAX_DIMENSIONS:,})"
    try:
        values = [float(x) for x in vector]
    except (TypeError, ValueError):
        return "a vector that is not all numbers"
    if not all(map(math.isfinite, values)):
        return "a vector holding NaN or Infinity"
    if math.hypot(*values) == 0:
        return "a vector of zeros"
    return None


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (so a dot product is the cosine)."""
    norm = math.hypot(*vector)  # no overflow for huge components (1e200 squared is inf)
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]
