"""Everything a person touches: the `diana-tui` Textual app and the `diana` command line."""

from pathlib import Path


def styles_dir() -> Path:
    """The .tcss files: inside the wheel, or the source tree."""
    package = Path(__file__).resolve().parent
    installed = package / "_shipped" / "styles"
    return installed if installed.is_dir() else package.parent / "styles"
