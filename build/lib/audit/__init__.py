"""Audit DB: the control plane that tracks every File through its states (ADR-0004)."""

from audit.models import FileState
from audit.store import (
    AuditDB,
    AuditError,
    FileRecord,
    IllegalTransition,
    Recovery,
    Registration,
    open_audit_db,
    process_alive,
    redact_url,
    utcnow,
)

__all__ = [
    "AuditDB",
    "AuditError",
    "FileRecord",
    "FileState",
    "IllegalTransition",
    "Recovery",
    "Registration",
    "process_alive",
    "open_audit_db",
    "redact_url",
    "utcnow",
]
