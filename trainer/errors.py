"""The trainer's one domain error, so the CLI can report a user's mistake without a traceback."""

from __future__ import annotations


class TrainerError(Exception):
    """A config or data problem; the message names the file/line/option and the fix."""
