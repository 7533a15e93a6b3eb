"""The footer: the keys of what has the focus, kept up to date where they stand.

Textual's Footer removes every key and mounts them all again whenever the bindings may have
changed (each focus change, each reactive declared with ``bindings=True``), and only a frame
after it hears of the change: a dozen widgets styled anew, and a frame lost, for a key a
person presses. Here the keys wanted are compared with the keys shown: a key that differs is
rewritten in place, a missing one is mounted once and kept (hidden, blank) while fewer are
needed, and a focus change is followed at once. Binding groups are shown key by key. Each
key renders its text once for what it shows (``Key``), not each time it is measured or drawn."""

from __future__ import annotations

from itertools import zip_longest
from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.style import Style
from textual.content import Content
from textual.css.styles import RenderStyles
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PALETTE_CLASS = "-command-palette"


class KeyShown(NamedTuple):
    """What one key of the footer shows."""

    key: str
    display: str
    description: str
    action: str
    disabled: bool
    tooltip: str


BLANK = KeyShown("", "", "", "", False, "")


class Key(FooterKey):
    """A footer key that draws itself once for what it shows. Textual's FooterKey works out
    its two parts' styles each time it is measured or drawn (twice a layout, for each key,
    when the focus moves); here they are kept until it is restyled, for the last few things
    the key showed (F3, then F2: the Approvals pane's key, then the chat's, again), as the
    Content Textual would make of them at each measure and draw."""

    KEPT = 4  # things shown kept drawn

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._drawn: dict[tuple[object, ...], tuple[list[RenderStyles], Content]] = {}

    def render(self) -> Content:  # type: ignore[override]
        # What the text depends on: the key and description, the parts' styles (new objects
        # each time the key is restyled) and the style the key has from its ancestors.
        parts: list[RenderStyles] = list(self._component_styles.values())
        base: Style = self.rich_style
        key = (self.key_display, self.description, base, *map(id, parts))
        drawn = self._drawn.get(key)
        if drawn is not None:
            return drawn[1]
        # As Textual makes a widget's Text into Content each time it is measured or drawn.
        content = Content.from_rich_text(super().render(), console=self.app.console)
        if len(self._drawn) >= self.KEPT:
            del self._drawn[next(iter(self._drawn))]  # the oldest
        self._drawn[key] = (parts, content)  # the parts kept alive: their ids stay theirs
        return content

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        # A key scrolls nothing: its virtual size is its size, just given by the layout.
        # Textual lays the screen out again when a widget's virtual size changes (a key
        # rewritten wider or narrower, F3 from the chat): that second pass found nothing new.
        return super()._size_updated(size, virtual_size, container_size, layout=False)


class KeysFooter(Footer):
    """A footer whose keys are rewritten in place, never remounted."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._show_posted = False

    def compose(self) -> list[Widget]:
        return []  # the keys are placed by show_keys, once the bindings are known

    def on_mount(self) -> None:  # Footer.on_mount (the bindings signal) runs too
        self.watch(self.screen, "focused", self._focus_moved, init=False)

    def bindings_changed(self, screen: Screen[object]) -> None:
        self._bindings_ready = True
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self._show_soon()

    def _focus_moved(self) -> None:
        # The screen tells the footer only after the next frame: the keys follow at once,
        # so they are drawn in the frame that shows the focus moved.
        if self.app.app_focus:
            self.show_keys()

    def watch_show_command_palette(self) -> None:
        self._show_soon()

    def watch_compact(self, compact: bool) -> None:
        for key in self.query_children(FooterKey):
            if not key.has_class(PALETTE_CLASS):  # as Textual's footer: the palette's is not
                key.compact = compact

    def _show_soon(self) -> None:
        """Show the keys once the messages already queued are handled (a burst: once)."""
        if not self._show_posted:
            self._show_posted = True
            self.call_later(self.show_keys)

    def wanted(self) -> tuple[list[KeyShown], KeyShown | None]:
        """The keys the bindings offer now, in order; the command palette's key, if shown."""
        active = self.screen.active_bindings
        by_action: dict[str, KeyShown] = {}
        for _node, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in by_action:  # one key per action
                by_action[binding.action] = KeyShown(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    not enabled,
                    tooltip,
                )
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            found = active.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _node, binding, enabled, _tooltip = found
                palette = KeyShown(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    not enabled,
                    binding.tooltip or binding.description,
                )
        return list(by_action.values()), palette

    def show_keys(self) -> None:
        """Bring the keys shown in line with the bindings: only what differs changes."""
        self._show_posted = False
        if not self.is_attached or not self._bindings_ready:
            return
        wanted, palette = self.wanted()
        shown = [key for key in self.query_children(FooterKey) if not key.has_class(PALETTE_CLASS)]
        more = []
        for key, want in zip_longest(shown, wanted):
            if key is None:
                more.append(self._new_key(want))
            else:
                rewrite(key, want or BLANK, shown=want is not None)
        kept = next(iter(self.query_children(f".{PALETTE_CLASS}")), None)
        if kept is not None:
            assert isinstance(kept, FooterKey)
            rewrite(kept, palette or BLANK, shown=palette is not None)
        elif palette is not None:
            more.append(self._new_key(palette, PALETTE_CLASS))
        if more:  # the keys go before the palette's, as Textual's footer has them
            self.mount_all(more, before=kept)

    def _new_key(self, want: KeyShown, classes: str = "") -> FooterKey:
        key = Key(
            want.key,
            want.display,
            want.description,
            want.action,
            disabled=want.disabled,
            tooltip=want.tooltip,
            classes=classes,
        )
        if classes != PALETTE_CLASS:  # the palette's key keeps its own (compact) style
            # As the footer is, from the start (a binding would restyle it once mounted).
            key.set_reactive(FooterKey.compact, self.compact)
            key.set_class(self.compact, "-compact", update=False)
        return key


def widths(*texts: str) -> tuple[int, ...]:
    return tuple(cell_len(text) for text in texts)


def rewrite(key: FooterKey, want: KeyShown, *, shown: bool) -> None:
    """``key`` shows ``want`` (a spare key: hidden, and blank, so nothing reads it as offered)."""
    if (key.key_display, key.description) != (want.display, want.description):
        # As wide as before (the same widths of key and description): no layout needed.
        same_width = widths(key.key_display, key.description) == widths(
            want.display, want.description
        )
        key.key_display, key.description = want.display, want.description
        key.refresh(layout=not same_width)
    key.key, key.action = want.key, want.action
    if key._disabled != want.disabled:
        key._disabled = want.disabled
        key.set_class(want.disabled, "-disabled")
    if (key.tooltip or "") != want.tooltip:
        key.tooltip = want.tooltip or None
    if key.display != shown:
        key.display = shown
