"""The errors the core raises to its front ends, each a one-line message a person can act on.
Each is defined where it is raised; this module is the list the front ends may catch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lazy import attribute

if TYPE_CHECKING:
    from ..approvals.policy import UnknownRule
    from ..approvals.proposal import (
        AlreadyDecided,
        DamagedProposal,
        ProposalChanged,
        UnknownProposal,
    )
    from ..calls.agent_switches import AgentSwitchRefused
    from ..calls.arguments import ArgumentsError
    from ..chat.chats import BadChatInput, UnknownChat
    from ..chat.images import BadImage
    from ..config.settings import ConfigError
    from ..content.jsontext import JSONProblem
    from ..llm.ollama import LLMProblem
    from ..mcp.catalog import CatalogError
    from ..mcp.pins import UnknownHeldTool
    from ..mcp.registry import RegistryError
    from ..mcp.subagent_request import NotCancellable, RequestFailed, UnknownRequest
    from ..mcp.venv_install import RegistryEntryError
    from ..runtime import NotOpened
    from ..shared.app_requests import AppGone, UnknownServer
    from ..storage.db import StorageError
    from ..system.browser import UnsafeURL
    from ..system.files import UnreadableFile
    from ..system.lifecycle import CloseError
    from ..tools.local import RegistryChangeError

_ORIGINS = {
    "AgentSwitchRefused": ("diana.core.calls.agent_switches", "AgentSwitchRefused"),
    "AlreadyDecided": ("diana.core.approvals.proposal", "AlreadyDecided"),
    "AppGone": ("diana.core.shared.app_requests", "AppGone"),
    "ArgumentsError": ("diana.core.calls.arguments", "ArgumentsError"),
    "BadChatInput": ("diana.core.chat.chats", "BadChatInput"),
    "BadImage": ("diana.core.chat.images", "BadImage"),
    "CatalogError": ("diana.core.mcp.catalog", "CatalogError"),
    "CloseError": ("diana.core.system.lifecycle", "CloseError"),
    "ConfigError": ("diana.core.config.settings", "ConfigError"),
    "DamagedProposal": ("diana.core.approvals.proposal", "DamagedProposal"),
    "JSONProblem": ("diana.core.content.jsontext", "JSONProblem"),
    "LLMProblem": ("diana.core.llm.ollama", "LLMProblem"),
    "NotCancellable": ("diana.core.mcp.subagent_request", "NotCancellable"),
    "NotOpened": ("diana.core.runtime", "NotOpened"),
    "ProposalChanged": ("diana.core.approvals.proposal", "ProposalChanged"),
    "RegistryChangeError": ("diana.core.tools.local", "RegistryChangeError"),
    "RegistryEntryError": ("diana.core.mcp.venv_install", "RegistryEntryError"),
    "RegistryError": ("diana.core.mcp.registry", "RegistryError"),
    "RequestFailed": ("diana.core.mcp.subagent_request", "RequestFailed"),
    "StorageError": ("diana.core.storage.db", "StorageError"),
    "UnknownChat": ("diana.core.chat.chats", "UnknownChat"),
    "UnknownHeldTool": ("diana.core.mcp.pins", "UnknownHeldTool"),
    "UnknownProposal": ("diana.core.approvals.proposal", "UnknownProposal"),
    "UnknownRequest": ("diana.core.mcp.subagent_request", "UnknownRequest"),
    "UnknownRule": ("diana.core.approvals.policy", "UnknownRule"),
    "UnknownServer": ("diana.core.shared.app_requests", "UnknownServer"),
    "UnreadableFile": ("diana.core.system.files", "UnreadableFile"),
    "UnsafeURL": ("diana.core.system.browser", "UnsafeURL"),
}

__all__ = [
    "AgentSwitchRefused",
    "AlreadyDecided",
    "AppGone",
    "ArgumentsError",
    "BadChatInput",
    "BadImage",
    "CatalogError",
    "CloseError",
    "ConfigError",
    "DamagedProposal",
    "JSONProblem",
    "LLMProblem",
    "NotCancellable",
    "NotOpened",
    "ProposalChanged",
    "RegistryChangeError",
    "RegistryEntryError",
    "RegistryError",
    "RequestFailed",
    "StorageError",
    "UnknownChat",
    "UnknownHeldTool",
    "UnknownProposal",
    "UnknownRequest",
    "UnknownRule",
    "UnknownServer",
    "UnreadableFile",
    "UnsafeURL",
]


def __getattr__(name: str) -> Any:
    return attribute(__name__, _ORIGINS, name)
