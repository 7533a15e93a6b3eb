"""The chat: a conversation with the local model, its turns, the prompt, the answer's sources,
and the tool gaps it notices."""
