"""DIANA's headless core: orchestrator, agents, storage and events. Never imports the UI."""
