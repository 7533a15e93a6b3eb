"""Content from outside or for a person: text that is not UTF-8 or not safe on a terminal,
JSON a person wrote, HTTP bodies read with a cap, a resource's parts, a message's attachments."""
