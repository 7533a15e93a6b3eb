"""The value types and constants the core hands its front ends: what a call, a proposal, a
server, a conversation, a model or a fact looks like, as the front ends receive and pass it.
Each is defined where the core keeps it; this module is the list the front ends may use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lazy import attribute

if TYPE_CHECKING:
    from ..approvals.policy import POLICY_FILE, PolicyEntry, Rule, Standing
    from ..approvals.policy import Kind as RuleKind
    from ..approvals.proposal import OPEN, SETTLED, Proposal, ProposalStatus
    from ..approvals.service import Decision
    from ..calls.tool_names import AgentSlot
    from ..chat.answer import NEVER_RAN, FactUsed, ToolCallRecord
    from ..chat.chats import FORMATS, OPTIONS, Chats, ChatSettings, ChatSummary
    from ..chat.conversation import Kind as MessageKind
    from ..chat.conversation import Message
    from ..chat.gaps import ToolGapReport
    from ..chat.images import IMAGES_PER_MESSAGE, Image
    from ..chat.session import ChatSession
    from ..chat.sources import Source
    from ..chat.turn_events import (
        ApprovalPending,
        Delta,
        GapFound,
        Progress,
        ToolCallFinished,
        ToolCallStarted,
        TurnCancelled,
        TurnEvent,
        TurnFailed,
        TurnFinished,
        TurnStarted,
    )
    from ..config.mcp_servers import LOG_LEVELS, MCP_SERVERS_FILE, MCPServerConfig
    from ..config.settings import SETTINGS_FILE, Exposure, Paths, Settings
    from ..content.attachments import Attached
    from ..llm.local_models import ModelInfo, PullProgress
    from ..llm.ollama import OllamaStatus
    from ..mcp.catalog import PromptInfo, ResourceContent, ResourceInfo
    from ..mcp.connection import ServerConnection
    from ..mcp.elicitation_form import Action, Elicitation, Field
    from ..mcp.elicitation_form import Answer as FormAnswer
    from ..mcp.info import ServerInfo, ServerStatus
    from ..mcp.pins import ToolChange
    from ..mcp.registry_entry import InstallPlan, RegistryServer, Setting
    from ..mcp.subagent import MCPSubagent
    from ..mcp.subagent_request import RequestState, SubagentRequest
    from ..memory import Fact, Hit, Memory, MemoryStatus, SearchResult
    from ..models import HOST_ORIGIN
    from ..shared.live import LiveApp
    from ..shared.live_rows import RECONNECT
    from ..shared.queries import (
        HEALTH,
        PROMPT,
        PROMPTS,
        READ,
        RESOURCES,
        TOOLS,
        HealthAnswer,
        Listing,
        PromptAnswer,
        ReadAnswer,
        ToolsAnswer,
        ToolSource,
    )
    from ..shared.queries import Answer as AppAnswer
    from ..storage.call_record import CALL_STATUSES, CallRecord
    from ..storage.execution_log import CallsFromElsewhere
    from ..system.files import MEDIA_DIR
    from ..system.processes import NOT_INHERITED
    from ..system.telemetry import SECRET_VALUES
    from ..tools.local import TOOLS_FILE, LocalToolSpec
    from ..usage.clients import ClientSummary
    from ..usage.cost import CostSnapshot
    from ..usage.stats import DROPPED_FIRST, USAGE_COLUMNS, UsageReport

_ORIGINS = {
    "Action": ("diana.core.mcp.elicitation_form", "Action"),
    "AgentSlot": ("diana.core.calls.tool_names", "AgentSlot"),
    "AppAnswer": ("diana.core.shared.queries", "Answer"),
    "ApprovalPending": ("diana.core.chat.turn_events", "ApprovalPending"),
    "Attached": ("diana.core.content.attachments", "Attached"),
    "CALL_STATUSES": ("diana.core.storage.call_record", "CALL_STATUSES"),
    "ClientSummary": ("diana.core.usage.clients", "ClientSummary"),
    "CallRecord": ("diana.core.storage.call_record", "CallRecord"),
    "CallsFromElsewhere": ("diana.core.storage.execution_log", "CallsFromElsewhere"),
    "ChatSession": ("diana.core.chat.session", "ChatSession"),
    "ChatSettings": ("diana.core.chat.chats", "ChatSettings"),
    "ChatSummary": ("diana.core.chat.chats", "ChatSummary"),
    "Chats": ("diana.core.chat.chats", "Chats"),
    "CostSnapshot": ("diana.core.usage.cost", "CostSnapshot"),
    "DROPPED_FIRST": ("diana.core.usage.stats", "DROPPED_FIRST"),
    "Decision": ("diana.core.approvals.service", "Decision"),
    "Delta": ("diana.core.chat.turn_events", "Delta"),
    "Elicitation": ("diana.core.mcp.elicitation_form", "Elicitation"),
    "FORMATS": ("diana.core.chat.chats", "FORMATS"),
    "IMAGES_PER_MESSAGE": ("diana.core.chat.images", "IMAGES_PER_MESSAGE"),
    "Image": ("diana.core.chat.images", "Image"),
    "Fact": ("diana.core.memory", "Fact"),
    "FactUsed": ("diana.core.chat.answer", "FactUsed"),
    "Field": ("diana.core.mcp.elicitation_form", "Field"),
    "FormAnswer": ("diana.core.mcp.elicitation_form", "Answer"),
    "GapFound": ("diana.core.chat.turn_events", "GapFound"),
    "HEALTH": ("diana.core.shared.queries", "HEALTH"),
    "HOST_ORIGIN": ("diana.core.models", "HOST_ORIGIN"),
    "HealthAnswer": ("diana.core.shared.queries", "HealthAnswer"),
    "Hit": ("diana.core.memory", "Hit"),
    "InstallPlan": ("diana.core.mcp.registry_entry", "InstallPlan"),
    "LOG_LEVELS": ("diana.core.config.mcp_servers", "LOG_LEVELS"),
    "Listing": ("diana.core.shared.queries", "Listing"),
    "LiveApp": ("diana.core.shared.live", "LiveApp"),
    "LocalToolSpec": ("diana.core.tools.local", "LocalToolSpec"),
    "MCPServerConfig": ("diana.core.config.mcp_servers", "MCPServerConfig"),
    "MCPSubagent": ("diana.core.mcp.subagent", "MCPSubagent"),
    "MCP_SERVERS_FILE": ("diana.core.config.mcp_servers", "MCP_SERVERS_FILE"),
    "MEDIA_DIR": ("diana.core.system.files", "MEDIA_DIR"),
    "Memory": ("diana.core.memory", "Memory"),
    "MemoryStatus": ("diana.core.memory", "MemoryStatus"),
    "Message": ("diana.core.chat.conversation", "Message"),
    "MessageKind": ("diana.core.chat.conversation", "Kind"),
    "ModelInfo": ("diana.core.llm.local_models", "ModelInfo"),
    "NEVER_RAN": ("diana.core.chat.answer", "NEVER_RAN"),
    "NOT_INHERITED": ("diana.core.system.processes", "NOT_INHERITED"),
    "OPEN": ("diana.core.approvals.proposal", "OPEN"),
    "OPTIONS": ("diana.core.chat.chats", "OPTIONS"),
    "OllamaStatus": ("diana.core.llm.ollama", "OllamaStatus"),
    "POLICY_FILE": ("diana.core.approvals.policy", "POLICY_FILE"),
    "PROMPT": ("diana.core.shared.queries", "PROMPT"),
    "PROMPTS": ("diana.core.shared.queries", "PROMPTS"),
    "Paths": ("diana.core.config.settings", "Paths"),
    "PolicyEntry": ("diana.core.approvals.policy", "PolicyEntry"),
    "Progress": ("diana.core.chat.turn_events", "Progress"),
    "PromptAnswer": ("diana.core.shared.queries", "PromptAnswer"),
    "PromptInfo": ("diana.core.mcp.catalog", "PromptInfo"),
    "Proposal": ("diana.core.approvals.proposal", "Proposal"),
    "ProposalStatus": ("diana.core.approvals.proposal", "ProposalStatus"),
    "PullProgress": ("diana.core.llm.local_models", "PullProgress"),
    "READ": ("diana.core.shared.queries", "READ"),
    "RECONNECT": ("diana.core.shared.live_rows", "RECONNECT"),
    "RESOURCES": ("diana.core.shared.queries", "RESOURCES"),
    "ReadAnswer": ("diana.core.shared.queries", "ReadAnswer"),
    "RegistryServer": ("diana.core.mcp.registry_entry", "RegistryServer"),
    "RequestState": ("diana.core.mcp.subagent_request", "RequestState"),
    "ResourceContent": ("diana.core.mcp.catalog", "ResourceContent"),
    "ResourceInfo": ("diana.core.mcp.catalog", "ResourceInfo"),
    "Rule": ("diana.core.approvals.policy", "Rule"),
    "RuleKind": ("diana.core.approvals.policy", "Kind"),
    "SECRET_VALUES": ("diana.core.system.telemetry", "SECRET_VALUES"),
    "SETTINGS_FILE": ("diana.core.config.settings", "SETTINGS_FILE"),
    "Exposure": ("diana.core.config.settings", "Exposure"),
    "SETTLED": ("diana.core.approvals.proposal", "SETTLED"),
    "SearchResult": ("diana.core.memory", "SearchResult"),
    "ServerConnection": ("diana.core.mcp.connection", "ServerConnection"),
    "ServerInfo": ("diana.core.mcp.info", "ServerInfo"),
    "ToolChange": ("diana.core.mcp.pins", "ToolChange"),
    "ServerStatus": ("diana.core.mcp.info", "ServerStatus"),
    "Setting": ("diana.core.mcp.registry_entry", "Setting"),
    "Settings": ("diana.core.config.settings", "Settings"),
    "Source": ("diana.core.chat.sources", "Source"),
    "Standing": ("diana.core.approvals.policy", "Standing"),
    "SubagentRequest": ("diana.core.mcp.subagent_request", "SubagentRequest"),
    "TOOLS": ("diana.core.shared.queries", "TOOLS"),
    "TOOLS_FILE": ("diana.core.tools.local", "TOOLS_FILE"),
    "ToolCallFinished": ("diana.core.chat.turn_events", "ToolCallFinished"),
    "ToolCallRecord": ("diana.core.chat.answer", "ToolCallRecord"),
    "ToolCallStarted": ("diana.core.chat.turn_events", "ToolCallStarted"),
    "ToolGapReport": ("diana.core.chat.gaps", "ToolGapReport"),
    "ToolSource": ("diana.core.shared.queries", "ToolSource"),
    "ToolsAnswer": ("diana.core.shared.queries", "ToolsAnswer"),
    "TurnCancelled": ("diana.core.chat.turn_events", "TurnCancelled"),
    "TurnEvent": ("diana.core.chat.turn_events", "TurnEvent"),
    "TurnFailed": ("diana.core.chat.turn_events", "TurnFailed"),
    "TurnFinished": ("diana.core.chat.turn_events", "TurnFinished"),
    "TurnStarted": ("diana.core.chat.turn_events", "TurnStarted"),
    "USAGE_COLUMNS": ("diana.core.usage.stats", "USAGE_COLUMNS"),
    "UsageReport": ("diana.core.usage.stats", "UsageReport"),
}

__all__ = [
    "CALL_STATUSES",
    "DROPPED_FIRST",
    "FORMATS",
    "HEALTH",
    "HOST_ORIGIN",
    "IMAGES_PER_MESSAGE",
    "LOG_LEVELS",
    "MCP_SERVERS_FILE",
    "MEDIA_DIR",
    "NEVER_RAN",
    "NOT_INHERITED",
    "OPEN",
    "OPTIONS",
    "POLICY_FILE",
    "PROMPT",
    "PROMPTS",
    "READ",
    "RECONNECT",
    "RESOURCES",
    "SECRET_VALUES",
    "SETTINGS_FILE",
    "SETTLED",
    "TOOLS",
    "TOOLS_FILE",
    "USAGE_COLUMNS",
    "Action",
    "AgentSlot",
    "AppAnswer",
    "ApprovalPending",
    "Attached",
    "CallRecord",
    "CallsFromElsewhere",
    "ChatSession",
    "ChatSettings",
    "ChatSummary",
    "Chats",
    "ClientSummary",
    "CostSnapshot",
    "Decision",
    "Delta",
    "Elicitation",
    "Exposure",
    "Fact",
    "FactUsed",
    "Field",
    "FormAnswer",
    "GapFound",
    "HealthAnswer",
    "Hit",
    "Image",
    "InstallPlan",
    "Listing",
    "LiveApp",
    "LocalToolSpec",
    "MCPServerConfig",
    "MCPSubagent",
    "Memory",
    "MemoryStatus",
    "Message",
    "MessageKind",
    "ModelInfo",
    "OllamaStatus",
    "Paths",
    "PolicyEntry",
    "Progress",
    "PromptAnswer",
    "PromptInfo",
    "Proposal",
    "ProposalStatus",
    "PullProgress",
    "ReadAnswer",
    "RegistryServer",
    "RequestState",
    "ResourceContent",
    "ResourceInfo",
    "Rule",
    "RuleKind",
    "SearchResult",
    "ServerConnection",
    "ServerInfo",
    "ServerStatus",
    "Setting",
    "Settings",
    "Source",
    "Standing",
    "SubagentRequest",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "ToolChange",
    "ToolGapReport",
    "ToolSource",
    "ToolsAnswer",
    "TurnCancelled",
    "TurnEvent",
    "TurnFailed",
    "TurnFinished",
    "TurnStarted",
    "UsageReport",
]


def __getattr__(name: str) -> Any:
    return attribute(__name__, _ORIGINS, name)
