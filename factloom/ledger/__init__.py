"""The SQL ledger: the source of truth for what was submitted and decided (ARCHITECTURE §3)."""

from __future__ import annotations

from factloom.ledger.db import Database
from factloom.ledger.pages import newest_first
from factloom.ledger.registry import (
    Trial,
    activate_version,
    active_version,
    active_versions,
    end_trial,
    find_update,
    finish_update,
    list_versions,
    note_progress,
    register_version,
    rollback,
    start_trial,
    start_update,
    trial_versions,
)
from factloom.ledger.tables import (
    AnswerFeedback,
    ApiKey,
    AuditEvent,
    AuditSample,
    Base,
    CertificationRun,
    CheckResult,
    FactSubmission,
    IngestBatch,
    ModelVersion,
    ReviewDecision,
    Status,
    VersionStatus,
)

__all__ = [
    "AnswerFeedback", "ApiKey", "AuditEvent", "AuditSample", "Base", "CertificationRun",
    "CheckResult", "Database", "FactSubmission", "IngestBatch",
    "ModelVersion", "ReviewDecision", "Status", "VersionStatus", "activate_version", "active_version",
    "active_versions", "find_update", "finish_update", "list_versions", "note_progress", "register_version",
    "start_update", "Trial", "trial_versions", "start_trial", "end_trial", "rollback", "newest_first",
]
