"""One root exception for the runner, split into terminal and transient failures.

The split decides what happens to a File: a terminal error (bad input that will never parse)
quarantines that File only; a transient error (lost connection, a lease taken over) gives the
File back to PENDING without counting an attempt; anything else is recorded against the File it
can be pinned on and re-raised. :func:`classify` maps the exceptions of the libraries we drive
(Spark, psycopg2) onto these branches.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

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
    """Retrying may help: the File returns to PENDING without counting an attempt."""


class LeaseLost(TransientError):
    """Another run took the File over (our lease lapsed); it is theirs now, leave it alone."""


class IntegrityError(CdcError):
    """The runner's own accounting does not add up (rows read versus staged): never mark such
    a File staged. Neither bad input nor transient: recorded against the File and re-raised."""


class ConfigError(CdcError):
    """The project's configuration is wrong; nothing was processed."""


class UsageError(click.ClickException):
    """A user error the CLI prints as one line and exits 2 on."""

    exit_code = 2


# Substrings of Java exceptions that mean the input itself cannot be read: no retry helps.
_UNREADABLE_INPUT = (
    "Encountered error while reading file",  # Spark's FAILED_READ_FILE, whatever the format
    "java.io.EOFException",
    "Unexpected end of input stream",
    "java.util.zip.ZipException",
    "Not in GZIP format",
    "incorrect header check",
    "is not a Parquet file",
    "ParquetDecodingException",
    "CorruptedException",
    "MalformedInputException",
    "CharacterCodingException",
    "Can not read value at",
)
# ... and of those that mean the engine or the network had a bad moment.
_TRANSIENT = (
    "Connection refused",
    "Connection reset",
    "SparkContext was shut down",
    "Py4JNetworkError",
)
# What the Spark catalog's PostgreSQL going away looks like from inside Spark: the JDBC driver's
# connection errors, and Iceberg's JDBC catalog failing its own reconnect with a cast error
# (apache/iceberg#11176, still in 1.9) whenever the server restarted under an open connection.
_CATALOG_GONE = (
    "Cannot cast org.postgresql.util.PSQLException to java.sql.SQLTransientException",
    "PSQLException: Connection to ",
    "PSQLException: The connection attempt failed",
    "PSQLException: An I/O error occurred while sending to the backend",
    "PSQLException: This connection has been closed",
    "PSQLException: FATAL: terminating connection",
    "PSQLException: FATAL: the database system is",
)
_CONNECTION = re.compile(
    r"connect|server closed|terminating connection|database system is|SSL SYSCALL"
    r"|could not (send|receive) data",
    re.I,
)
_AGAIN = "run the same command again once it answers (nothing half-applied is kept)"


def server_gone(exc: BaseException) -> str | None:
    """One line for a database that went away or refuses connections (the destination, the
    Audit DB or the Spark catalog's PostgreSQL), or None for any other error."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:  # the error and what it was raised from
        seen.add(id(link))
        text = str(link)
        module = type(link).__module__.split(".")[0]
        if (
            module in ("psycopg2", "sqlalchemy")
            and type(link).__name__ in ("OperationalError", "InterfaceError")
            and _CONNECTION.search(text)  # not a timeout, a serialization failure, a full disk
        ):
            said = text.removeprefix("(psycopg2.OperationalError) ").strip().splitlines()
            return f"lost PostgreSQL: {said[0][:300] if said else type(link).__name__}; {_AGAIN}"
        for sign in _CATALOG_GONE:
            if sign in text:
                found = re.search(r"PSQLException: ([^\n]+)", text)
                detail = found.group(1).strip()[:300] if found else "Iceberg could not reconnect"
                return f"lost the Spark catalog's PostgreSQL: {detail}; {_AGAIN}"
        link = link.__cause__ or link.__context__
    return None


def first_line(exc: BaseException) -> str:
    """The exception's first line; for an error raised in Spark's JVM, the Java exception's
    (Py4J's own first line only names the call)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            said = str(java.toString()).strip().splitlines()
            if said:
                return said[0][:500]
        except Exception:  # noqa: BLE001 - the JVM may be gone: say what Python has
            pass
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


def disk_full(exc: BaseException, where: str | None = None) -> str | None:
    """One line for a write that found no space left (``where``, or where the error or the
    running SparkSession can tell), or None."""
    place = no_space_under(exc, where)
    if place is None:
        return None
    return (
        f"no space left on device{place}: free space there, then run the same command again "
        "(nothing half-written is kept)"
    )


def no_space_under(exc: BaseException, where: str | None = None) -> str | None:
    """For a write that found no space left: " under <folder>" (``where``, or where the error
    or the running SparkSession can tell), or "" when nothing can; None for any other error."""
    text = str(exc)
    if "No space left on device" not in text and getattr(exc, "errno", None) != errno.ENOSPC:
        return None
    found = re.search(r"(/[^\s:()\"']+)[\"']?:? \(?No space left on device", text)
    if not where:
        where = found.group(1) if found else getattr(exc, "filename", None) or _spark_warehouse()
    return f" under {where}" if where else ""


def _spark_warehouse() -> str | None:
    """The running SparkSession's warehouse folder (where its tables' files are written)."""
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is None:
            return None
        conf = session.sparkContext.getConf()
        value = conf.get("spark.sql.catalog.spark_catalog.warehouse") or conf.get(
            "spark.sql.warehouse.dir"
        )
        if not value:
            return None
        text = str(value).removeprefix("file:")
        return text if "://" in text else str(Path(text).resolve())
    except Exception:  # noqa: BLE001 - no Spark here, or it is gone
        return None


def classify(
    exc: BaseException,
    *,
    path: str | None = None,
    content_hash: str | None = None,
    process_id: str | None = None,
) -> CdcError:
    """The exception as a CdcError: TerminalError, TransientError, or a plain CdcError (unknown:
    record it against the File it can be pinned on, then re-raise)."""
    if isinstance(exc, CdcError):
        return exc
    where = dict(path=path, content_hash=content_hash, process_id=process_id)
    text = f"{type(exc).__name__}: {exc}"
    gone = server_gone(exc) or disk_full(exc)
    if gone:  # not the File's fault: no attempt counts against it
        return TransientError(gone, **where)
    try:
        import psycopg2

        if isinstance(exc, psycopg2.DataError):
            return TerminalError(f"the destination refused a value: {first_line(exc)}", **where)
        if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError):
            return TransientError(f"destination connection: {first_line(exc)}", **where)
    except ImportError:  # pragma: no cover
        pass
    if any(marker in text for marker in _TRANSIENT) or isinstance(exc, ConnectionError):
        return TransientError(f"{type(exc).__name__}: {first_line(exc)}", **where)
    for marker in _UNREADABLE_INPUT:
        if marker in text:
            lines = [ln.strip() for ln in text.splitlines()]
            cause = [
                ln for ln in lines if ln.startswith("Caused by:") and "SparkException" not in ln
            ]
            line = (
                cause[0].removeprefix("Caused by:").strip()
                if cause
                else next((ln for ln in lines if marker in ln), marker)
            )
            return TerminalError(f"cannot be read: {line[:300]}", **where)
    return CdcError(f"{type(exc).__name__}: {first_line(exc)}", **where)


def error_line(exc: BaseException) -> str:
    """The one line a command prints for an error, and a failed run's record keeps
    (runs.detail): the runner's own message, or what a lost server, a full disk or the
    exception's first line says."""
    if isinstance(exc, CdcError):
        return exc.message
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    return server_gone(exc) or disk_full(exc) or f"{type(exc).__name__}: {first_line(exc)}"
