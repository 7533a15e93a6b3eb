"""What the chat says about Ollama and the model: its title, the warning at start, the list
of installed models."""

from __future__ import annotations

from diana.core.api.shown import context_text as window_text
from diana.core.api.types import ChatSession, OllamaStatus
from rich.text import Text


def ollama_state(status: OllamaStatus | None, model: str) -> str:
    if status is None:
        return "checking Ollama…"
    if not status.reachable:
        return "Ollama not reachable"
    if not status.has(model):
        return "model not installed"
    return "Ollama ready"


def chat_title(chat: ChatSession) -> str:
    """The chat's border title: the model, how Ollama stands, thinking if it is on, and how
    much of the model's context the conversation fills once an answer has said."""
    think = " · thinking on" if chat.think else ""
    fill = chat.context_fill()
    context = "" if fill is None else f" · {context_brief(*fill)}"
    return f"Chat — {chat.model} · {ollama_state(chat.last_status, chat.model)}{think}{context}"


def context_brief(used: int, window: int) -> str:
    """``ctx 3.1k/8k 38%``: the context filled, as the chat's title shows it."""
    return f"ctx {_tokens(used)}/{window_text(window)} {min(999, round(100 * used / window))}%"


def context_text(used: int, window: int) -> str:
    """``1.2k/32k tokens (4%)``: what the conversation fills of the model's context."""
    return f"{_tokens(used)}/{_tokens(window)} tokens ({min(999, round(100 * used / window))}%)"


def _tokens(count: int) -> str:
    if count < 1000:
        return str(count)
    if count < 10_000:
        return f"{count / 1000:.1f}k"
    return f"{round(count / 1000)}k"


def startup_warning(status: OllamaStatus, model: str) -> str | None:
    """What stands between the person and a working model, said once at start; None: nothing."""
    if not status.reachable:
        return f"{status.problem}. Commands still work: /help."
    if not status.has(model):
        return (
            f'model "{model}" is not installed — "ollama pull {model}", or /model to '
            "pick an installed one."
        )
    return None


def installed_models(status: OllamaStatus, in_use: str) -> Text:
    """/model without a name: the installed models, the one in use marked."""
    listing = ", ".join(f"{m} (in use)" if m == in_use else m for m in status.models)
    return Text.assemble(("installed models: ", "bold"), listing or "none")
