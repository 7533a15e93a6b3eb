"""Web sources in a turn: numbered as the model receives them, cited as [N] in its answer,
and listed under the answer.

Any successful tool result that carries web pages counts: one page (``{"url", "title", …}``,
as web_fetch answers) or a list of them (``{"results": [{"url", "title", …}]}``, as
web_search answers). Each distinct URL gets the next number of the turn, written into the
result as ``"source": N`` before the model reads it, so the model can cite it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

# [1], [2, 3], [ 4 ] — not [fact 12], which cites memory.
CITATION = re.compile(r"\[\s*(\d{1,3}(?:\s*,\s*\d{1,3})*)\s*\]")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # never printed: a title is shown on terminals
UNCITED_SHOWN = 3  # when the answer cites none: the first few results it rests on


class Source(BaseModel):
    """A web page a turn's answer rests on."""

    n: int
    title: str
    url: str
    cited: bool = True  # False: the answer rests on it but did not cite it


class SourceBook:
    """The sources of one turn, numbered in the order the model first saw them."""

    def __init__(self) -> None:
        self.sources: dict[str, Source] = {}
        self.read: list[str] = []  # pages read whole (web_fetch), in order

    def number(self, result: Any) -> Any:
        """``result`` with each page it carries numbered (the same URL keeps its number)."""
        if not isinstance(result, dict):
            return result
        if _page(result):
            self.read.append(result["url"])
            return {"source": self._add(result), **result}
        pages = result.get("results")
        if isinstance(pages, list) and any(_page(p) for p in pages):
            numbered = [{"source": self._add(p), **p} if _page(p) else p for p in pages]
            return {**result, "results": numbered}
        return result

    def _add(self, page: dict[str, Any]) -> int:
        url = page["url"]
        known = self.sources.get(url)
        if known is None:
            title = CONTROL.sub("", " ".join(str(page.get("title") or url).split()))[:200]
            known = self.sources[url] = Source(n=len(self.sources) + 1, title=title, url=url)
        return known.n

    def cited_in(self, answer: str) -> list[Source]:
        """The sources ``answer`` cites (by number or by URL), in number order; if it cites
        none, the pages it read, else the first results, marked as not cited."""
        if not self.sources:
            return []
        numbers = {int(n) for group in CITATION.findall(answer) for n in group.split(",")}
        cited = [s for s in self.sources.values() if s.n in numbers or s.url in answer]
        if cited:
            return cited
        read = [self.sources[url] for url in dict.fromkeys(self.read)]
        uncited = read or list(self.sources.values())[:UNCITED_SHOWN]
        return [s.model_copy(update={"cited": False}) for s in uncited]


def _page(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("url"), str)
        and value["url"].startswith(("http://", "https://"))
        and "title" in value
    )
