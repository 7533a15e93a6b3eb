"""Telling a person who is looking at another window that a proposal waits.

With ``notify`` "bell" the terminal's bell rings; with "desktop" (the default) it rings and
the terminal is asked to show a desktop notification naming the tool and its risk: OSC 777
for terminals that speak it (foot, urxvt, VTE terminals such as GNOME Terminal), OSC 9 for
the rest (iTerm2, WezTerm, ghostty, kitty, Windows Terminal; others ignore it). Inside tmux
the notification is passed through to the terminal around it (tmux's ``allow-passthrough``
must be on for it to arrive; the bell always does). "none" sends nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from diana.core.api.types import Proposal

BELL = "\a"
TITLE = "DIANA: approval needed"
SHOWN = 200  # characters of the notification's text
# Control characters would end the sequence early; ";" separates OSC 777's fields.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f;]+")


def waiting_text(proposals: Sequence[Proposal]) -> str:
    """What waits, as the notification says it: the first tool and its risk, and how many
    more."""
    first = proposals[0]
    text = f"{first.tool} ({first.risk.replace('_', ' ')}) waits in Approvals"
    more = len(proposals) - 1
    return text + (f", and {more} more" if more else "")


def _clean(text: str) -> str:
    return _UNSAFE.sub(" ", text).strip()[:SHOWN]


def desktop_notification(title: str, body: str, environ: Mapping[str, str]) -> str:
    """The escape sequence asking this terminal for a desktop notification."""
    title, body = _clean(title), _clean(body)
    term = environ.get("TERM", "")
    if term.startswith(("foot", "rxvt")) or "VTE_VERSION" in environ:
        sequence = f"\x1b]777;notify;{title};{body}\a"
    else:
        sequence = f"\x1b]9;{title}: {body}\a"
    if "TMUX" in environ:  # tmux's passthrough: every ESC inside doubled
        sequence = "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return sequence


def nudge(proposals: Sequence[Proposal], notify: str, environ: Mapping[str, str]) -> str:
    """What to write to the terminal for proposals that arrived unseen ("" for nothing)."""
    if notify == "none" or not proposals:
        return ""
    if notify == "bell":
        return BELL
    return BELL + desktop_notification(TITLE, waiting_text(proposals), environ)
