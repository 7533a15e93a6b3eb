"""The web as diana reads it: the addresses a fetch may reach, one page fetched as readable text,
and the search backends (SearXNG, Ollama's web API)."""
