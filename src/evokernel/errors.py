"""Errors a user can cause. The CLI prints them as one line (no traceback) and exits non-zero.

Raise a subclass of `EvokernelError` for bad input (a broken checkpoint, a malformed config,
an unknown task); let programming errors propagate as ordinary exceptions.
"""

from __future__ import annotations


class EvokernelError(Exception):
    """A user-facing error: `str(err)` is one line naming the problem and the file/key/tensor."""

    exit_code: int = 2


class CheckpointError(EvokernelError):
    """A checkpoint directory that cannot be loaded as a Qwen3 model."""


class ConfigError(EvokernelError):
    """A configuration file or option with a bad value."""


class TaskError(EvokernelError):
    """An unknown kernel task or a malformed candidate/task definition."""
