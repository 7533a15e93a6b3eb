"""The config files: where config and data live, settings.json, mcp-servers.json, the one way
diana writes them, and noticing that one changed."""
