"""DIANA's memory: facts found by their words and by their meaning (see fact_store.py)."""

from .embedding import DEFAULT_EMBED_MODEL, Embedder, EmbeddingUnavailable, OllamaEmbedder
from .fact_store import MEMORY_AGENT, Fact, Hit, Memory, MemoryStatus, Saved, SearchResult

__all__ = [
    "DEFAULT_EMBED_MODEL",
    "MEMORY_AGENT",
    "Embedder",
    "EmbeddingUnavailable",
    "Fact",
    "Hit",
    "Memory",
    "MemoryStatus",
    "OllamaEmbedder",
    "Saved",
    "SearchResult",
]
