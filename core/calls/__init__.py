"""Agents and the one way to call a tool: the orchestrator, the names and schemas a call is
checked against, the gate it passes, the call while it runs, its tracing."""
