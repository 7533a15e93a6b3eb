"""Class changes that restyle only the widgets they can change.

Textual restyles a widget and its whole subtree whenever one of its classes changes, in
case a rule names the class on an ancestor (``.-maximized Label``) or sets a style the
subtree inherits (a colour, a background). Showing a pane then restyled every widget in
it and in the pane it hid (a long chat's every message). A class that the stylesheet uses
only to size, place or border the widget that carries it restyles that widget alone; any
other still restyles the subtree, so a stylesheet (ours, Textual's, a theme's) that starts
styling descendants by it stays right."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from textual.css.model import CombinatorType, RuleSet, SelectorType
from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode

# Styles of a widget that its descendants neither inherit nor paint over.
OWN_STYLES = frozenset(
    {
        "width",
        "height",
        "min_width",
        "min_height",
        "max_width",
        "max_height",
        "display",
        "dock",
        "offset",
        "padding",
        "margin",
    }
)
OWN_PREFIXES = ("border", "auto_border", "outline")

# The stylesheet's rules (kept: their identity says when it was parsed anew) and the
# classes whose change can restyle the descendants of the widget that carries them.
_reaching: tuple[list[RuleSet], frozenset[str]] | None = None
# The widgets whose classes changed inside ``restyled_once``, to restyle as it ends.
_batch: dict[DOMNode, None] | None = None


def own(rule_name: str) -> bool:
    return rule_name in OWN_STYLES or rule_name.startswith(OWN_PREFIXES)


def classes_reaching_descendants(stylesheet: Stylesheet) -> frozenset[str]:
    """The classes that some rule names on an ancestor, or that set a style the
    descendants inherit or are painted on."""
    global _reaching
    rules = stylesheet.rules
    if _reaching is not None and _reaching[0] is rules:
        return _reaching[1]
    names: set[str] = set()
    for rule in rules:
        cascades = not all(own(name) for name in rule.styles.get_rules())
        for selector_set in rule.selector_set:
            selectors = selector_set.selectors
            # The widget styled is the one the selectors after the last combinator match.
            subject = max(
                (n for n, s in enumerate(selectors) if s.combinator != CombinatorType.SAME),
                default=0,
            )
            for n, selector in enumerate(selectors):
                if selector.type is SelectorType.CLASS and (n < subject or cascades):
                    names.add(selector.name)
    _reaching = (rules, frozenset(names))
    return _reaching[1]


def set_class(node: DOMNode, add: bool, name: str) -> None:
    """Add or remove the class ``name``: ``node`` is restyled, and its subtree only if the
    stylesheet styles descendants by that class."""
    if node.has_class(name) == add:
        return
    node.set_class(add, name, update=False)
    stylesheet = node.app.stylesheet
    if name in classes_reaching_descendants(stylesheet):
        node.update_node_styles(animate=True)  # the whole subtree, as Textual does
    elif _batch is not None:
        _batch[node] = None
    else:
        stylesheet.update_nodes([node], animate=True)


@contextmanager
def restyled_once(stylesheet: Stylesheet) -> Iterator[None]:
    """Class changes made meanwhile by ``set_class`` restyle each widget once, at the end
    (F3: the pane shown gains its size and its focused border, the pane hidden loses both)."""
    global _batch
    if _batch is not None:  # within another: that one restyles
        yield
        return
    _batch = {}
    try:
        yield
    finally:
        nodes, _batch = _batch, None
        if nodes:
            stylesheet.update_nodes(nodes, animate=True)
