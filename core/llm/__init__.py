"""Talking to the local model through Ollama: where it is, the models it has, and the replies
it writes when an MCP server asks (sampling). The chat built on it is in chat/."""
