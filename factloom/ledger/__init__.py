"""The SQL ledger: the source of truth for what was submitted and decided (ARCHITECTURE §3)."""

from __future__ import annotations

from factloom.ledger.db import Database
from factloom.ledger.registry import activate_version, active_versions, list_versions, register_version
from factloom.ledger.tables import (
    ApiKey,
    AuditEvent,
    Base,
    CheckResult,
    FactSubmission,
    IngestBatch,
    ModelVersion,
    ReviewDecision,
    Status,
)

__all__ = [
    "ApiKey", "AuditEvent", "Base", "CheckResult", "Database", "FactSubmission", "IngestBatch",
    "ModelVersion", "ReviewDecision", "Status", "activate_version", "active_versions", "list_versions",
    "register_version",
]
