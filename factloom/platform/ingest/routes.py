"""``/v1/facts`` and ``/v1/batches``."""

from __future__ import annotations

from fastapi import APIRouter, status

from factloom.ledger import FactSubmission, Status
from factloom.platform.deps import DbDep, IngestKey, SettingsDep
from factloom.platform.ingest import service
from factloom.platform.ingest.schemas import BatchAccepted, BatchIn, BatchOut, CheckOut, FusionOut, SubmissionOut
from factloom.platform.metrics import INGESTED

__all__ = ["router", "submission_out"]

router = APIRouter(prefix="/v1", tags=["ingest"])


@router.post("/facts", status_code=status.HTTP_202_ACCEPTED, response_model=BatchAccepted)
def post_facts(body: BatchIn, principal: IngestKey, db: DbDep, settings: SettingsDep) -> BatchAccepted:
    principal.require_kb(body.kb)
    service.check_backlog(db=db, kb=body.kb, limit=settings.ingest_max_backlog,
                          retry_after=settings.ingest_backlog_retry_s)
    submitted = service.submit(
        db=db, kb=body.kb, facts=body.facts, max_facts=settings.max_batch_facts, api_key_id=principal.key_id,
        evidence_dir=settings.evidence_dir, max_image_bytes=settings.max_image_bytes, actor=principal.actor,
    )
    service.enqueue(submitted.ids, settings.check_chunk_size)
    INGESTED.inc(len(submitted.ids))
    return BatchAccepted(batch_id=submitted.batch_id, count=len(submitted.ids), duplicates=submitted.duplicates)


@router.get("/batches/{batch_id}", response_model=BatchOut)
def get_batch(batch_id: str, principal: IngestKey, db: DbDep) -> BatchOut:
    batch, counts = service.get_batch(db=db, batch_id=batch_id)
    principal.require_kb(batch.kb)
    # accepted and reviewed are on their way into the graph; needs_review waits for a person
    waiting = sum(counts[s.value] for s in (Status.pending, Status.checking, Status.accepted, Status.reviewed))
    return BatchOut(
        batch_id=batch.id, kb=batch.kb, count=batch.count, created_at=batch.created_at,
        status="checking" if waiting else "done", counts=counts,
    )


@router.get("/facts/{submission_id}", response_model=SubmissionOut)
def get_fact(submission_id: str, principal: IngestKey, db: DbDep) -> SubmissionOut:
    row = service.get_submission(db=db, submission_id=submission_id)
    principal.require_kb(row.kb)
    return submission_out(row)


def submission_out(row: FactSubmission) -> SubmissionOut:
    return SubmissionOut(
        id=row.id, batch_id=row.batch_id, kb=row.kb, fact_id=row.fact_id, subject=row.subject,
        predicate=row.predicate, object=row.object, source=row.source, valid_from=row.valid_from,
        valid_to=row.valid_to, evidence=row.evidence, status=row.status.value, probability=row.probability,
        verdict_reason=row.verdict_reason,
        checks=[
            CheckOut(verifier=c.verifier, probability=c.probability, score=c.score, explanation=c.explanation,
                     details=c.details, model_version=c.model_version)
            for c in row.checks
        ],
        fusion=_fusion(row),
        created_at=row.created_at, updated_at=row.updated_at, committed_at=row.committed_at,
    )


def _fusion(row: FactSubmission) -> FusionOut | None:
    fused = next((c for c in row.checks if c.verifier == "fusion"), None)
    if fused is None:
        return None
    d = fused.details or {}
    return FusionOut(
        probability=fused.probability, verdict=d.get("verdict"), method=d.get("method", "fusion"),
        accept=d.get("accept"), reject=d.get("reject"), certificate=d.get("certificate"),
        versions=d.get("versions") or {"fusion": fused.model_version}, abstained=d.get("abstained") or [],
    )
