"""The five panes of the main screen."""

from .agents import AgentsPane
from .approvals import ApprovalsPane
from .chat import ChatPane
from .execlog import ExecutionLogPane
from .servers import ServersPane

__all__ = ["AgentsPane", "ApprovalsPane", "ChatPane", "ExecutionLogPane", "ServersPane"]
