"""Resources that went with a message, written for the model and told apart again."""

from __future__ import annotations

from diana.core.content.attachments import Attached, attachment_block, split_attachments


def test_a_stored_message_is_told_apart_into_what_was_typed_and_what_went_with_it() -> None:
    typed = "Compare @a:x://one and @b:y://two"
    blocks = [
        attachment_block("a", "x://one", "text/markdown", "# One\n\nsome text"),
        attachment_block("b", "y://two", None, "[image/png, 68 bytes: not text, not attached]"),
        attachment_block("a", "x://big", "text/plain", "ab\n[cut at 64 KiB]"),
    ]
    assert split_attachments("\n\n".join([typed, *blocks])) == (
        typed,
        [
            Attached("a", "x://one", "text/markdown, 16 bytes"),
            Attached("b", "y://two", "image/png, 68 bytes: not text, not attached"),
            Attached("a", "x://big", "text/plain, cut at 64 KiB"),
        ],
    )


def test_text_that_only_looks_like_an_attachment_stays_what_was_typed() -> None:
    for typed in (
        "plain words",
        '<resource server="a" uri="b">\nx\n</resource>',  # not after the message
        'see\n\n<resource server="a" uri="b">\nx\n</resource>\n\nand more',  # not at the end
    ):
        assert split_attachments(typed) == (typed, [])
