"""One root exception for the runner, split into terminal and transient failures.

The split decides what happens to a File: a transient error (lost connection, a lease taken
over, a crashed executor) sends it back to PENDING until its attempts run out; a terminal
error (bad input that will never parse) quarantines it at once.
"""

from __future__ import annotations

import click


class CdcError(Exception):
    """Root of every error the runner raises on purpose.

    ``path``, ``content_hash`` and ``process_id`` say which File and which runner invocation the
    error is about, so that a log line or an Audit DB row can name them.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        content_hash: str | None = None,
        process_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.content_hash = content_hash
        self.process_id = process_id


class TerminalError(CdcError):
    """Retrying cannot help: the File is quarantined with this reason."""


class TransientError(CdcError):
    """Retrying may help: the File returns to PENDING while attempts remain."""


class ConfigError(CdcError):
    """The project's configuration is wrong; nothing was processed."""


class UsageError(click.ClickException):
    """A user error the CLI prints as one line and exits 2 on."""

    exit_code = 2
