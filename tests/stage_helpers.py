"""Helpers that tests of several stages share."""

from __future__ import annotations

from tasks.tracking import NullLog


class RecordingLog(NullLog):
    """A NullLog that keeps what the stages send to MLflow (metrics and tags)."""

    def __init__(self) -> None:
        self.logged: dict = {}

    def metrics(self, values, step=None) -> None:
        self.logged.update(values)

    def tags(self, values) -> None:
        self.logged.update(values)
