"""Names re-exported by the door's modules, imported only when first used.

The door lists every public name, but a `diana` command that reads proposals must not pay
for importing the MCP SDK or the ollama client because the door also names a server's
connection or a model: each name is looked up in the module that defines it when a front
end first imports it (PEP 562's module ``__getattr__``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def attribute(module: str, origins: dict[str, tuple[str, str]], name: str) -> Any:
    """``name`` of the door's ``module``, from where the core defines it."""
    try:
        origin, attr = origins[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    return getattr(import_module(origin), attr)
