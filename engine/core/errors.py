"""The error every reader of a user's file raises: already worded as `file:line:col: message` lines."""

from __future__ import annotations


class SourceError(ValueError):
    """A problem in a user's file, already formatted as `file:line:col: message` lines."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("\n".join(messages))
