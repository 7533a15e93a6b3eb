"""The `diana` command line: the same core as the app, without a screen.

Whatever it prints passes through ``printable`` (core/text.py) on its way to the terminal:
text from servers, tools, models and files cannot carry an escape sequence there.

Each command starts only what it needs (``servers`` in its entry in main.py, and the
README's table): the MCP SDK and the ollama client are imported only by commands that
start a server or ask the model, and a command that can answer from the database answers
from it. The commands live in a module each by subject; main.py is the table of them.
"""

from .common import EXIT_INTERRUPTED
from .main import main

__all__ = ["EXIT_INTERRUPTED", "main"]
