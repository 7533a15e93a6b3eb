"""The words of a question, as the facts' full-text index (FTS5, porter stemming) takes them.

A question ORed word by word, stopwords included, matches most facts ("what", "is", "my")
and drowns the one it is about. So: the stopwords go, the index stems what is left (its
`porter` tokenizer stems the query as it stemmed the facts), and facts holding every
content word come before those holding only some.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)

# Words that say nothing of what a fact is about: English function words, question words and
# the few verbs every question is built with.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can cannot could did do does doing don't down
    during each few for from further had has have having he her here hers herself him
    himself his how i if in into is isn't it its itself just let me more most my myself no
    nor not now of off on once only or other ought our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was wasn't we were what when where which
    while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve get got tell know remember recall please thing things
    """.split()
)


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are not stopwords, lower-cased, each once, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word not in STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)


def quoted(word: str) -> str:
    """A word as an FTS5 string: user text is never read as query syntax (NEAR, AND, ")."""
    return '"' + word.replace('"', '""') + '"'


def match_all(words: list[str]) -> str:
    """An FTS5 query matching facts that hold every word (each stemmed by the index)."""
    return " AND ".join(quoted(w) for w in words)


def match_any(words: list[str]) -> str:
    """An FTS5 query matching facts that hold any of the words."""
    return " OR ".join(quoted(w) for w in words)
