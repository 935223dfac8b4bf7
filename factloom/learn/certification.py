"""Re-certification of each kb's thresholds on live labels: the beat's ``factloom.learn.recertify`` job.

The statistics are :class:`factloom.verify.audit.AuditLedger`'s; this module feeds it from the ledger and
acts on what it says. Per kb and run:

1. the kb's audit ledger is read back from its newest ``certification_run`` (``AuditLedger.from_dict``);
   the first run starts it from the active fusion version's validation facts (``validation.json``
   beside a learned fusion: calibrated probabilities and labels of the held-out facts) or, for a
   fusion without them, from the review labels the ledger holds;
2. the labels that arrived since the last run's watermark are added as one batch: reviewer decisions
   on facts the fusion sent to review (weight 1: every one of them is labelled) and blind-audit labels
   on facts it decided by itself (weight ``1 / inclusion``, Horvitz–Thompson); then ``update()`` —
   drift check, tightening check, and a look when the labels grew enough;
3. when the certified accept or reject threshold differs from the one in service, a new fusion
   version (kind ``fusion``, :class:`~factloom.verify.certified.CertifiedFusion`: the base fusion with
   the new thresholds, the certificate inside) is registered and activated; check workers pick it up
   within ``registry_refresh_s``. A side the evidence certifies nothing on keeps the threshold in
   service while that threshold is the original one (too few labels yet to say anything), and
   automates nothing once a re-certified threshold loses its certificate (drift, or the tightening
   check found no stricter candidate that passes);
4. the run is stored with its figures (:func:`figures`): the admin Certification page and the
   ``factloom_certified_error_bound`` / ``factloom_certification_target`` / ``factloom_automation_ratio``
   / ``factloom_audit_backlog`` gauges read the same rows.

Scores in the ledger are the logit of the fused probability (higher means more likely true, as the
audit ledger needs); thresholds go back to probabilities for the fusion.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta
from sqlalchemy import func, select

from factloom.ledger import (
    AuditSample,
    CertificationRun,
    Database,
    FactSubmission,
    IngestBatch,
    ReviewDecision,
    Status,
    active_version,
    register_version,
)
from factloom.ledger.tables import DECISIONS_THAT_HOLD, utcnow
from factloom.verify.audit import AuditLedger, weighted_lower_bound, weighted_upper_bound
from factloom.verify.certified import CERTIFIED_FILE, CertifiedFusion
from factloom.verify.fusion import VerdictRule

__all__ = ["CertificationConfig", "recertify", "recertify_all", "latest_runs", "history", "VALIDATION_FILE",
           "save_validation", "score_of", "probability_of"]

log = logging.getLogger(__name__)

VALIDATION_FILE = "validation.json"  # beside a learned fusion: its held-out facts' probabilities and labels
_CLIP = 1e-6
_SAME = 1e-9  # thresholds closer than this are the same threshold
_FINAL = (Status.reviewed, Status.committed, Status.rejected)  # a reviewer's decision was carried out


@dataclass(frozen=True)
class CertificationConfig:
    """Args:
        target: error allowed among auto-accepted facts.
        reject_target: true facts allowed among auto-rejected ones.
        alpha: one minus the confidence, over every look.
        models_dir: where new fusion versions' artefacts go.
        rule_accept, rule_reject: the min rule's thresholds (the kb's fusion when none is registered).
    """

    target: float = 0.01
    reject_target: float = 0.01
    alpha: float = 0.05
    models_dir: Path = Path("models")
    rule_accept: float = 0.9
    rule_reject: float = 0.1

    @classmethod
    def of(cls, settings: Any) -> CertificationConfig:
        return cls(target=settings.certification_target,
                   reject_target=settings.certification_reject_target or settings.certification_target,
                   alpha=settings.certification_alpha, models_dir=settings.models_dir,
                   rule_accept=settings.accept_threshold, rule_reject=settings.reject_threshold)


def score_of(p: float) -> float:
    """The audit ledger's score of a fused probability: its logit (clipped off 0 and 1)."""
    q = min(max(float(p), _CLIP), 1.0 - _CLIP)
    return math.log(q / (1.0 - q))


def probability_of(score: float | None) -> float | None:
    return None if score is None else 1.0 / (1.0 + math.exp(-score))


def save_validation(directory: Path, probabilities: Any, labels: Any) -> Path:
    """Write a learned fusion's held-out facts beside it, so its live certification starts from them."""
    path = directory / VALIDATION_FILE
    path.write_text(json.dumps({"probabilities": [float(p) for p in probabilities],
                                "labels": [int(y) for y in labels]}) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- what is in service


@dataclass(frozen=True)
class _InService:
    version: str | None
    accept: float | None
    reject: float | None
    base: str | None  # the base fusion's artefact (None: the min rule)
    recertified: bool  # registered by this job: its thresholds carry a live certificate
    validation: Path | None


def _in_service(db: Database, kb: str, config: CertificationConfig) -> _InService:
    row = active_version(db, kind="fusion", kb=kb)
    if row is None:
        return _InService(None, config.rule_accept, config.rule_reject, None, False, None)
    path = Path(row.artefact)
    if (path / CERTIFIED_FILE).exists():
        meta = CertifiedFusion.read(path)
        base = meta.get("base")
        validation = Path(base) / VALIDATION_FILE if base else None
        return _InService(row.id, meta["accept"], meta["reject"], base, True,
                          validation if validation and validation.exists() else None)
    meta = json.loads((path / "fusion.json").read_text(encoding="utf-8"))
    validation = path / VALIDATION_FILE
    return _InService(row.id, meta["thresholds"]["accept"], meta["thresholds"]["reject"], str(path), False,
                      validation if validation.exists() else None)


# ---------------------------------------------------------------- labels from the ledger


def _review_labels(db: Database, kb: str, since: datetime | None, until: datetime) -> tuple[list[float], list[int]]:
    """Reviewer decisions carried out in (since, until] on facts the fusion sent to review, one per fact
    (the latest); facts the audit sent back are left out: their audit label counts, with its weight."""
    where = [FactSubmission.kb == kb, FactSubmission.probability.is_not(None), FactSubmission.status.in_(_FINAL),
             ReviewDecision.created_at <= until,
             FactSubmission.id.not_in(select(AuditSample.submission_id).where(AuditSample.kb == kb))]
    if since is not None:
        where.append(ReviewDecision.created_at > since)
    with db.session() as session:
        rows = session.execute(
            select(FactSubmission.id, FactSubmission.probability, ReviewDecision.decision)
            .join(ReviewDecision, ReviewDecision.submission_id == FactSubmission.id)
            .where(*where).order_by(ReviewDecision.created_at)
        ).all()
    latest = {sid: (float(p), d) for sid, p, d in rows if p is not None}
    return ([score_of(p) for p, _ in latest.values()],
            [1 if d in DECISIONS_THAT_HOLD else 0 for _, d in latest.values()])


def _audit_labels(db: Database, kb: str, since: datetime | None,
                  until: datetime) -> tuple[list[float], list[int], list[float]]:
    where = [AuditSample.kb == kb, AuditSample.label.is_not(None), AuditSample.labelled_at <= until]
    if since is not None:
        where.append(AuditSample.labelled_at > since)
    with db.session() as session:
        rows = session.execute(select(AuditSample.probability, AuditSample.label, AuditSample.inclusion)
                               .where(*where)).all()
    return ([score_of(p) for p, _, _ in rows], [1 if y == "holds" else 0 for _, y, _ in rows],
            [1.0 / max(pi, 1e-9) for _, _, pi in rows])


# ---------------------------------------------------------------- figures


def _bound_at(ledger: AuditLedger, side: str, threshold: float | None, alpha: float) -> float | None:
    """``1 - alpha`` upper bound on the error of the facts the threshold in service decides, on all the
    evidence (post-stratified weights, Clopper–Pearson on the Kish sample); ``None``: nothing decided."""
    if threshold is None:
        return None
    t = score_of(threshold) if side == "accept" else -score_of(threshold)
    block = ledger.block(side, t)
    n, k = block["effective"], block["error_rate"] * block["effective"]
    if n <= 0 or k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1.0, n - k))


def _audit_error(db: Database, kb: str, alpha: float) -> dict[str, dict[str, float | int | None]]:
    """Per side, the realised error among the audited automatic verdicts: weighted (``1 / inclusion``)
    estimate and its two-sided ``1 - alpha`` interval."""
    with db.session() as session:
        rows = session.execute(select(AuditSample.verdict, AuditSample.label, AuditSample.inclusion)
                               .where(AuditSample.kb == kb, AuditSample.label.is_not(None))).all()
    out: dict[str, dict[str, float | int | None]] = {}
    for side, verdict, wrong_label in (("accept", "accepted", "does_not_hold"), ("reject", "rejected", "holds")):
        mine = [(y == wrong_label, 1.0 / max(pi, 1e-9)) for v, y, pi in rows if v == verdict]
        if not mine:
            out[side] = {"labels": 0, "rate": None, "low": None, "high": None}
            continue
        z = np.array([float(w) for w, _ in mine])
        w = np.array([x for _, x in mine])
        out[side] = {"labels": len(mine), "rate": float((w * z).sum() / w.sum()),
                     "low": weighted_lower_bound(z, w, alpha / 2), "high": weighted_upper_bound(z, w, alpha / 2)}
    return out


def _automation(db: Database, kb: str) -> float | None:
    """Share of the kb's checked facts the fusion decided by itself (those the audit sent back included)."""
    with db.session() as session:
        decided = session.scalar(select(func.count()).select_from(FactSubmission).where(
            FactSubmission.kb == kb, FactSubmission.status.not_in([Status.pending, Status.checking]))) or 0
        reviewed = session.scalar(select(func.count()).select_from(FactSubmission).where(
            FactSubmission.kb == kb, FactSubmission.review_reason.is_not(None),
            FactSubmission.review_reason != "audit")) or 0
    return None if not decided else max(0.0, 1.0 - reviewed / decided)


def _backlog(db: Database, kb: str) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(AuditSample).where(
            AuditSample.kb == kb, AuditSample.label.is_(None))) or 0)


def _cert(ledger: AuditLedger | None, side: str) -> dict[str, Any] | None:
    cert = None if ledger is None else (ledger.accept if side == "accept" else ledger.reject)
    if cert is None:
        return None
    out = asdict(cert)
    t = out["threshold"]
    out["probability"] = probability_of(t if side == "accept" or t is None else -t)
    return out


# ---------------------------------------------------------------- the run


def recertify(db: Database, *, kb: str, config: CertificationConfig, now: datetime | None = None) -> dict[str, Any]:
    """One run for ``kb`` (see the module's docstring); returns the figures it stored."""
    now = now or utcnow()
    with db.session() as session:
        last = session.scalars(select(CertificationRun).where(CertificationRun.kb == kb)
                               .order_by(CertificationRun.created_at.desc(), CertificationRun.id.desc())).first()
        state, since = (last.ledger, last.watermark) if last is not None else (None, None)
    service = _in_service(db, kb, config)
    ledger = AuditLedger.from_dict(state) if state else None
    r_scores, r_labels = _review_labels(db, kb, since if ledger else None, now)
    a_scores, a_labels, a_weights = _audit_labels(db, kb, since if ledger else None, now)
    events: list[str] = []
    if ledger is None:
        if service.validation is not None:
            data = json.loads(service.validation.read_text(encoding="utf-8"))
            start_scores, start_labels = [score_of(p) for p in data["probabilities"]], data["labels"]
            basis = "validation facts"
        else:  # no validation facts kept: the review labels are the first evidence
            start_scores, start_labels, basis = r_scores, r_labels, "review labels"
            r_scores, r_labels = [], []
        if start_scores:
            ledger = AuditLedger.start(start_scores, start_labels, target=config.target,
                                       reject_target=config.reject_target, alpha=config.alpha)
            events.append(f"started from {len(start_scores)} {basis}")
    if ledger is not None and (r_scores or a_scores):
        ledger.add(r_scores + a_scores, r_labels + a_labels, [1.0] * len(r_scores) + a_weights)
        events += ledger.update()["events"]
    accept, reject = service.accept, service.reject
    if ledger is not None:
        accept = _next(ledger.accept_threshold, ledger.accept, service.accept, service.recertified, "accept")
        reject = _next(ledger.reject_threshold, ledger.reject, service.reject, service.recertified, "reject")
        if accept is not None and reject is not None and reject >= accept:
            reject = None
    registered = None
    if ledger is not None and (_moved(accept, service.accept) or _moved(reject, service.reject)):
        registered = _register(db, kb=kb, config=config, service=service, accept=accept, reject=reject, ledger=ledger)
        events.append(f"registered {registered}: accept {_fmt(service.accept)} → {_fmt(accept)}, "
                      f"reject {_fmt(service.reject)} → {_fmt(reject)}")
    audit = _audit_error(db, kb, config.alpha)
    out: dict[str, Any] = {
        "kb": kb, "at": now.isoformat(), "target": config.target, "reject_target": config.reject_target,
        "alpha": config.alpha, "accept": accept, "reject": reject,
        "bound": {"accept": _bound_at(ledger, "accept", accept, config.alpha) if ledger else None,
                  "reject": _bound_at(ledger, "reject", reject, config.alpha) if ledger else None},
        "certificate": {"accept": _cert(ledger, "accept"), "reject": _cert(ledger, "reject")},
        "audit_error": audit, "automation": _automation(db, kb), "backlog": _backlog(db, kb),
        "labels": len(ledger.labels) if ledger else 0, "look": ledger.look if ledger else 0,
        "drifts": ledger.drifts if ledger else 0, "events": events,
        "new_labels": {"review": len(r_labels), "audit": len(a_labels)},
    }
    with db.session() as session:
        session.add(CertificationRun(kb=kb, created_at=now, watermark=now, figures=out,
                                     ledger=ledger.as_dict() if ledger else None, registered=registered,
                                     fusion_version=registered or service.version))
    if registered:
        log.info("kb %s: re-certified thresholds in %s (%s)", kb, registered, "; ".join(events))
    return out


def _next(score: float | None, cert: Any, in_service: float | None, recertified: bool, side: str) -> float | None:
    if cert is not None and cert.certified and score is not None:
        return probability_of(score)
    # nothing certified: an original threshold stays until the evidence says something; a re-certified
    # one that lost its certificate automates nothing
    return None if recertified else in_service


def _moved(new: float | None, old: float | None) -> bool:
    return (new is None) != (old is None) or (new is not None and old is not None and abs(new - old) > _SAME)


def _fmt(p: float | None) -> str:
    return "none" if p is None else f"{p:.4f}"


def _register(db: Database, *, kb: str, config: CertificationConfig, service: _InService, accept: float | None,
              reject: float | None, ledger: AuditLedger) -> str:
    certificate = {"accept": _cert(ledger, "accept"), "reject": _cert(ledger, "reject"), "look": ledger.look,
                   "labels": len(ledger.labels), "drifts": ledger.drifts, "target": config.target,
                   "reject_target": config.reject_target, "alpha": config.alpha}
    artefact = config.models_dir / f"fusion-{kb}-certified-{time.strftime('%Y%m%d%H%M%S')}-{time.time_ns() % 10**6}"
    CertifiedFusion(VerdictRule(), accept=accept, reject=reject, certificate=certificate,
                    base_artefact=service.base).save(artefact)
    metrics = {"accept": accept, "reject": reject, "target": config.target, "base": service.base,
               "certificate": certificate, "recertified_from": service.version}
    return register_version(db, kind="fusion", kb=kb, artefact=artefact, metrics=metrics, parent=service.version)


def recertify_all(db: Database, config: CertificationConfig) -> list[dict[str, Any]]:
    """One run for every kb; a kb that fails is logged and left for the next period."""
    with db.session() as session:
        kbs = sorted(set(session.scalars(select(IngestBatch.kb).distinct())))
    out = []
    for kb in kbs:
        try:
            out.append(recertify(db, kb=kb, config=config))
        except Exception:
            log.exception("re-certification of kb %s failed; the next period retries", kb)
    return out


# ---------------------------------------------------------------- reading the runs


def latest_runs(db: Database) -> dict[str, dict[str, Any]]:
    """Each kb's newest run's figures, with the audit backlog as it is now (the admin page and the gauges)."""
    with db.session() as session:
        newest = (select(CertificationRun.kb, func.max(CertificationRun.id).label("id"))
                  .group_by(CertificationRun.kb).subquery())
        rows = session.execute(select(CertificationRun.kb, CertificationRun.figures, CertificationRun.created_at)
                               .join(newest, newest.c.id == CertificationRun.id)).all()
        waiting = dict(session.execute(select(AuditSample.kb, func.count()).where(AuditSample.label.is_(None))
                                       .group_by(AuditSample.kb)).tuples().all())
    out = {}
    for kb, figures, at in rows:
        out[kb] = {**figures, "backlog": int(waiting.get(kb, 0)), "run_at": at}
    return dict(sorted(out.items()))


def history(db: Database, *, kb: str, limit: int = 200) -> list[dict[str, Any]]:
    """The kb's last ``limit`` runs' figures, oldest first."""
    with db.session() as session:
        rows = session.execute(select(CertificationRun.figures, CertificationRun.created_at)
                               .where(CertificationRun.kb == kb)
                               .order_by(CertificationRun.id.desc()).limit(limit)).all()
    return [{**f, "run_at": at} for f, at in reversed(rows)]
