"""A class change restyles the widgets it can change (tui/restyle.py): the widget alone when
the stylesheet only sizes or borders it by that class; its whole subtree when a rule names
the class on an ancestor or sets a style the subtree inherits."""

from __future__ import annotations

from collections.abc import Iterable

from diana.tui.restyle import set_class
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.dom import DOMNode
from textual.widgets import Label

CSS = """
.box { height: 5; }
.box.-tall { height: 8; border: round $accent; }
.-marked Label { text-style: bold; }
.box.-tinted { color: red; }
"""


class Host(App[None]):
    CSS = CSS

    def compose(self) -> ComposeResult:
        with Vertical(classes="box"):
            yield Label("one")
            yield Label("two")


async def restyled_by(app: Host, add: bool, name: str) -> list[DOMNode]:
    box = app.query_one(".box")
    restyled: list[DOMNode] = []
    update_nodes = app.stylesheet.update_nodes

    def spy(nodes: Iterable[DOMNode], animate: bool = False) -> None:
        nodes = list(nodes)
        restyled.extend(nodes)
        update_nodes(nodes, animate=animate)

    app.stylesheet.update_nodes = spy  # type: ignore[method-assign]
    try:
        set_class(box, add, name)
    finally:
        del app.stylesheet.update_nodes
    return restyled


async def test_a_class_that_sizes_the_widget_restyles_it_alone() -> None:
    app = Host()
    async with app.run_test() as pilot:
        box = app.query_one(".box")
        assert await restyled_by(app, True, "-tall") == [box]
        await pilot.pause()
        assert box.outer_size.height == 8
        assert await restyled_by(app, False, "-tall") == [box]
        await pilot.pause()
        assert box.outer_size.height == 5
        assert await restyled_by(app, False, "-tall") == []  # nothing changed


async def test_a_class_named_on_an_ancestor_restyles_the_subtree() -> None:
    app = Host()
    async with app.run_test() as pilot:
        box, labels = app.query_one(".box"), list(app.query(Label))
        assert set(await restyled_by(app, True, "-marked")) >= {box, *labels}
        await pilot.pause()
        assert all(label.styles.text_style.bold for label in labels)


async def test_a_class_that_sets_an_inherited_style_restyles_the_subtree() -> None:
    app = Host()
    async with app.run_test():
        box, labels = app.query_one(".box"), list(app.query(Label))
        assert set(await restyled_by(app, True, "-tinted")) >= {box, *labels}
