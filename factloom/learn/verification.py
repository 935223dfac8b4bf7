"""Training the check stage's models from the real store and ledger, and registering them.

``factloom train scorer --kb KB``: the kb's accepted, current facts from Neo4j; a held-out share
(with corrupted-tail negatives) calibrates the scorer per relation and measures it; the scorer is
saved under the platform home's ``models/`` and registered as the kb's active ``scorer``. With
``--nproc N`` it runs data-parallel in N processes under ``torchrun`` (:mod:`factloom.learn.distributed`).

``factloom train fusion --kb KB``: labels from the ledger — review decisions first, then automatic
verdicts (accepted / committed true, rejected false) — with each submission's stored verifier results
as features; fits :class:`~factloom.verify.fuse_model.LearnedFusion` with certified thresholds and
registers it as the kb's active ``fusion``. Check workers pick either up within
``registry_refresh_s`` seconds, without a restart.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from factloom.learn.artefacts import save_probe
from factloom.ledger import register_version

__all__ = ["MIN_PER_CLASS", "ScorerFacts", "corrupt", "split_facts", "finish_scorer", "train_scorer", "train_fusion",
           "fusion_examples", "scorer_main", "fusion_main"]

Triple = tuple[str, str, str]
# true and false judged submissions a fusion needs at least (half fit the model, half calibrate it)
MIN_PER_CLASS = 10


def corrupt(
    triples: Sequence[Triple], entities: Sequence[str], known: set[Triple], rng: random.Random
) -> list[Triple]:
    """One corrupted triple per fact (tail, or head every other time) that is not a known fact."""
    out = []
    for i, (s, p, o) in enumerate(triples):
        for _ in range(20):
            e = rng.choice(entities)
            cand = (s, p, e) if i % 2 == 0 else (e, p, o)
            if cand not in known:
                out.append(cand)
                break
    return out


@dataclass
class ScorerFacts:
    """A kb's facts shuffled by the seed (the scorer's vocabulary order), the validation and training
    facts split from them, and the generator that shuffled them (it goes on to corrupt the validation
    facts)."""

    triples: list[Triple]
    valid: list[Triple]
    train: list[Triple]
    rng: random.Random


def split_facts(triples: Sequence[Triple], *, kb: str, valid_share: float = 0.1, seed: int = 0) -> ScorerFacts:
    """The kb's distinct facts, shuffled and split: ``valid_share`` (at least 10) to validate."""
    shuffled = sorted(set(triples))
    if len(shuffled) < 20:
        raise SystemExit(f"kb {kb!r} holds {len(shuffled)} accepted facts; a scorer needs at least 20")
    rng = random.Random(seed)
    rng.shuffle(shuffled)
    n_valid = max(10, int(valid_share * len(shuffled)))
    return ScorerFacts(shuffled, shuffled[:n_valid], shuffled[n_valid:], rng)


def train_scorer(
    store: Any, db: Any, *, kb: str, models_dir: Path, rank: int = 64, epochs: int = 30, valid_share: float = 0.1,
    seed: int = 0, progress: bool = True, watermark: datetime | None = None, negatives: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """Train, calibrate, save and register a scorer for ``kb``; returns (version, metrics).

    ``watermark``: the latest commit among the facts it learns (continual updates learn what was
    committed after it); ``negatives``: a sampled softmax of that many entities (see
    :meth:`~factloom.model.scorer.ComplExScorer.fit`)."""
    from factloom.model.scorer import ComplExScorer

    t0 = time.perf_counter()
    facts = split_facts(store.accepted_triples(kb), kb=kb, valid_share=valid_share, seed=seed)
    scorer = ComplExScorer.from_triples(facts.triples, rank=rank)  # every name known: valid facts are not unseen
    losses = scorer.fit(facts.train, epochs=epochs, seed=seed, progress=progress, negatives=negatives)
    return finish_scorer(db, scorer, facts, kb=kb, epochs=epochs, losses=losses, models_dir=models_dir,
                         watermark=watermark, started=t0)


def finish_scorer(
    db: Any, scorer: Any, facts: ScorerFacts, *, kb: str, epochs: int, losses: Sequence[float], models_dir: Path,
    watermark: datetime | None, started: float, extra: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Calibrate a trained scorer on its validation facts and as many corrupted ones, measure it, save
    it with its probe and register it as ``kb``'s active scorer; returns (version, metrics), ``extra``
    among the metrics."""
    import numpy as np

    triples, valid, train, rng, rank = facts.triples, facts.valid, facts.train, facts.rng, scorer.rank
    entities = sorted({x for s, _, o in triples for x in (s, o)})
    known = set(triples)
    fakes = corrupt(valid, entities, known, rng)
    labelled = valid + fakes
    labels = [1] * len(valid) + [0] * len(fakes)
    scorer.calibrate(labelled, labels)
    probs = scorer.score(labelled)
    judged = [(p, y) for p, y in zip(probs, labels, strict=True) if p is not None]
    p_arr = np.array([p for p, _ in judged])
    y_arr = np.array([y for _, y in judged])
    metrics: dict[str, Any] = {
        "facts": len(triples), "train_facts": len(train), "valid_facts": len(valid), "valid_negatives": len(fakes),
        "entities": len(entities), "relations": len({p for _, p, _ in triples}), "rank": rank, "epochs": epochs,
        "final_loss": round(losses[-1], 5) if losses else None,
        "valid_accuracy": round(float(((p_arr >= 0.5) == y_arr).mean()), 4) if len(judged) else None,
        **(extra or {}),
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    models_dir.mkdir(parents=True, exist_ok=True)
    artefact = models_dir / f"scorer-{kb}-{time.strftime('%Y%m%d%H%M%S')}.pt"
    scorer.save(artefact)
    save_probe(artefact, valid[:1000])  # what a first update's retention gate is measured on
    version = register_version(db, kind="scorer", kb=kb, artefact=artefact, metrics=metrics, watermark=watermark)
    return version, metrics


def fusion_examples(db: Any, *, kb: str, limit: int = 200_000) -> tuple[list[list[Any]], list[int], dict[str, int]]:
    """(verifier results per submission, labels, label sources) for every judged submission of ``kb``.

    A review decision is the label where there is one; otherwise the automatic verdict. Submissions
    still pending or waiting for review teach nothing.
    """
    from sqlalchemy import select

    from factloom.ledger import CheckResult, FactSubmission, ReviewDecision, Status
    from factloom.ledger.tables import DECISIONS_THAT_HOLD
    from factloom.verify.base import VerifierResult

    judged = {Status.accepted: 1, Status.committed: 1, Status.reviewed: 1, Status.rejected: 0}
    with db.session() as session:
        subs = session.execute(
            select(FactSubmission.id, FactSubmission.status)
            .where(FactSubmission.kb == kb, FactSubmission.status.in_(list(judged)))
            .order_by(FactSubmission.created_at).limit(limit)
        ).all()
        ids = [s for s, _ in subs]
        decisions: dict[str, int] = {}
        checks: dict[str, list[VerifierResult]] = {}
        for start in range(0, len(ids), 900):  # bounded IN lists (SQLite's parameter limit)
            part = ids[start:start + 900]
            for sid, decision in session.execute(
                select(ReviewDecision.submission_id, ReviewDecision.decision)
                .where(ReviewDecision.submission_id.in_(part)).order_by(ReviewDecision.created_at)
            ):
                decisions[sid] = int(decision in DECISIONS_THAT_HOLD)  # the latest decision wins
            for c in session.scalars(select(CheckResult).where(CheckResult.submission_id.in_(part),
                                                               CheckResult.verifier != "fusion")):
                details = dict(c.details or {})
                # a learned fusion sees the scorer unfloored (the floor only guards the min rule)
                probability = details.get("unfloored", c.probability)
                checks.setdefault(c.submission_id, []).append(
                    VerifierResult(c.verifier, probability, c.explanation, score=c.score,
                                   details=details, model_version=c.model_version))
    rows, labels, origin = [], [], {"review": 0, "auto": 0}
    for sid, status in subs:
        if sid not in checks:
            continue
        rows.append(checks[sid])
        if sid in decisions:
            labels.append(decisions[sid])
            origin["review"] += 1
        else:
            labels.append(judged[status])
            origin["auto"] += 1
    return rows, labels, origin


def train_fusion(
    db: Any, *, kb: str, models_dir: Path, target: float = 0.0007, method: str = "gbdt", seed: int = 0,
    folds: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """Fit, certify, save and register a learned fusion for ``kb``; returns (version, metrics).

    As ``factloom bench factcheck`` measured it: cross-fitted (``folds``; by default 5 once each class
    has ``5 * MIN_PER_CLASS`` examples, else a held-out half) with the plausibility scorer's numeric
    features beside each verifier's logit.
    """
    from factloom.model.scorer import FEATURE_NAMES
    from factloom.verify.fuse_model import LearnedFusion

    rows, labels, origin = fusion_examples(db, kb=kb)
    true, false = sum(labels), len(labels) - sum(labels)
    if min(true, false) < MIN_PER_CLASS:
        raise SystemExit(f"kb {kb!r} has {len(labels)} judged submissions ({true} true, {false} false): a fusion "
                         f"needs at least {MIN_PER_CLASS} of each (review decisions or automatic verdicts)")
    names = sorted({r.verifier for row in rows for r in row})
    if folds is None:
        folds = 5 if min(true, false) >= 5 * MIN_PER_CLASS else 0
    details = {"plausibility": list(FEATURE_NAMES)} if "plausibility" in names else {}
    try:
        fusion = LearnedFusion(names, details=details, method=method, target=target, seed=seed,
                               folds=folds).fit(rows, labels)
    except ValueError as exc:
        raise SystemExit(f"cannot fit a fusion for kb {kb!r}: {exc}") from exc
    metrics: dict[str, Any] = {
        "examples": len(labels), "true": int(sum(labels)), "labels_from": origin, "verifiers": names,
        "target": target, "folds": folds, "accept": fusion.accept, "reject": fusion.reject,
        "certificate": fusion.certificate.as_dict() if fusion.certificate else None, **fusion.metrics,
    }
    artefact = models_dir / f"fusion-{kb}-{time.strftime('%Y%m%d%H%M%S')}"
    fusion.save(artefact)
    if fusion.held_out is not None and fusion.calibrator is not None:  # live certification starts from them
        from factloom.learn.certification import save_validation

        raw, held_labels = fusion.held_out
        save_validation(artefact, fusion.calibrator.predict(raw.tolist()), held_labels)
    version = register_version(db, kind="fusion", kb=kb, artefact=artefact, metrics=metrics)
    return version, metrics


def _open() -> tuple[Any, Any, Path]:
    from factloom.config import get_settings
    from factloom.graph.store import Neo4jStore
    from factloom.ledger import Database

    settings = get_settings()
    return Neo4jStore(settings.neo4j_uri, settings.neo4j_auth()), Database(settings.sql_url), settings.models_dir


def scorer_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="factloom train scorer",
                                description="train the plausibility scorer on a kb's accepted facts and register it")
    p.add_argument("--kb", required=True)
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nproc", type=int, default=1,
                   help="train data-parallel in this many processes on this machine (execs torchrun; "
                        "see docs/learning.md)")
    args = p.parse_args(argv)
    if args.nproc < 1:
        p.error("--nproc must be at least 1")
    if args.nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
                   "-m", "factloom.learn.distributed", "--kb", args.kb, "--rank", str(args.rank),
                   "--epochs", str(args.epochs), "--seed", str(args.seed)]
        os.execv(sys.executable, command)  # noqa: S606 - torchrun with our own arguments; its exit status is ours
    store, db, models = _open()
    try:
        from factloom.learn.continual import committed_since

        _, watermark = committed_since(db, args.kb, None)
        version, metrics = train_scorer(store, db, kb=args.kb, models_dir=models, rank=args.rank,
                                        epochs=args.epochs, seed=args.seed, watermark=watermark)
    finally:
        store.close()
        db.dispose()
    print(f"scorer for kb {args.kb}: {version} (active) {json.dumps(metrics)}")
    return 0


def fusion_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="factloom train fusion",
                                description="fit the learned fusion on a kb's judged submissions and register it")
    p.add_argument("--kb", required=True)
    p.add_argument("--target", type=float, default=0.0007, help="allowed error among auto-accepted facts")
    p.add_argument("--method", choices=["gbdt", "logistic"], default="gbdt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--folds", type=int, default=None,
                   help="cross-fitting folds (0: a held-out half); default 5 when each class has enough examples")
    args = p.parse_args(argv)
    store, db, models = _open()
    try:
        version, metrics = train_fusion(db, kb=args.kb, models_dir=models, target=args.target,
                                        method=args.method, seed=args.seed, folds=args.folds)
    finally:
        store.close()
        db.dispose()
    print(f"fusion for kb {args.kb}: {version} (active) {json.dumps(metrics, default=str)}")
    return 0
