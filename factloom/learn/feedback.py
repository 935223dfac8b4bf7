"""Continual learning of the router and reasoner from answer feedback.

People mark answers right or wrong (``POST /v1/feedback``, the admin Ask page); each question with a
right answer (one marked right, or the name given for a wrong one) becomes a training question. An
update of a kb (:func:`update_reasoner`), as the ``learn`` task runs it:

1. The feedback given since the active reasoner's watermark is read from the ledger. Fewer than
   ``min_feedback`` answers: nothing to do. No reasoner yet: a router and a reasoner are trained
   from scratch on every feedback question (:func:`~factloom.learn.qa.train_kb`), the router first,
   so the reasoner learns on the graphs that router retrieves.
2. Otherwise a tenth of the new questions is held out; the active reasoner trains on the others
   plus a ``replay`` sample of the questions it learned before, with the EWC penalty against its
   own weights (Fisher on those old questions), on the graphs the active router retrieves.
3. Gates: hits@1 on a fixed probe of old questions at least ``retention`` of the parent's, and on
   the held-out new questions above the parent's. The candidate is registered with its parent,
   watermark and gates: ``active`` when it passed, else a ``candidate`` while the parent serves.

The router is trained when a kb gets its first models and kept by later updates: what it picks is
a relation plan, and the reasoner's updates are gated end to end through it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from factloom.learn.artefacts import ewc_path
from factloom.learn.continual import (
    LearnConfig,
    Outcome,
    Progress,
    reporter,
    tried,
    watermark_of,
    what_is_new,
)
from factloom.learn.gates import judge
from factloom.learn.qa import QA, Job, fit, hits_at_1, prepare, train_kb
from factloom.ledger import AnswerFeedback, Database, active_version, finish_update, start_update
from factloom.model.ewc import ElasticWeights, empirical_fisher
from factloom.model.features import RelationFeatures, Sample, collate
from factloom.model.pipeline import load_model, save_model
from factloom.model.reasoner import PathReasoner
from factloom.model.router import RelationRouter

__all__ = ["feedback_since", "questions_from", "new_feedback", "reasoner_due", "update_reasoner"]

log = logging.getLogger(__name__)

Row = tuple[str, str, bool, str | None]  # question, answer, correct, expected


def feedback_since(db: Database, kb: str, after: datetime | None = None,
                   until: datetime | None = None) -> tuple[list[Row], datetime | None]:
    """``kb``'s feedback given after ``after`` (all where ``None``) and up to ``until``, oldest first,
    and the latest instant among it."""
    query = select(AnswerFeedback.question, AnswerFeedback.answer, AnswerFeedback.correct,
                   AnswerFeedback.expected, AnswerFeedback.created_at).where(AnswerFeedback.kb == kb)
    if after is not None:
        query = query.where(AnswerFeedback.created_at > after)
    if until is not None:
        query = query.where(AnswerFeedback.created_at <= until)
    with db.session() as session:
        rows = session.execute(query.order_by(AnswerFeedback.id)).all()
    return [(q, a, c, e) for q, a, c, e, _ in rows], max((r[-1] for r in rows), default=None)


def questions_from(rows: Sequence[Row]) -> list[QA]:
    """One training question per distinct question with a right answer: the answers marked right and
    the names given for wrong ones (the latest word on an answer wins); a question with only wrong
    answers and no right one named teaches nothing here."""
    verdicts: dict[str, dict[str, bool]] = {}
    for question, answer, correct, expected in rows:
        said = verdicts.setdefault(question.strip(), {})
        said[answer] = correct
        if expected:
            said[expected] = True
    return [QA(q, [a for a, ok in said.items() if ok], "feedback") for q, said in verdicts.items()
            if any(said.values())]


def new_feedback(db: Database, kb: str) -> tuple[int, datetime | None]:
    """How many answers of ``kb`` were marked since its active reasoner learned (all, without one),
    and the latest instant among them."""
    after = watermark_of(active_version(db, kind="reasoner", kb=kb))
    query = select(func.count(), func.max(AnswerFeedback.created_at)).where(AnswerFeedback.kb == kb)
    if after is not None:
        query = query.where(AnswerFeedback.created_at > after)
    with db.session() as session:
        count, latest = session.execute(query).one()
    return int(count or 0), latest


def reasoner_due(db: Database, *, min_feedback: int) -> list[str]:
    """The kbs with ``min_feedback`` or more :func:`new_feedback` and no finished update on them."""
    with db.session() as session:
        kbs = sorted(session.scalars(select(AnswerFeedback.kb).distinct()))
    due = []
    for kb in kbs:
        count, latest = new_feedback(db, kb)
        if count >= min_feedback and not tried(db, kind="reasoner", kb=kb, watermark=latest):
            due.append(kb)
    return due


def update_reasoner(store: Any, embedder: Any, db: Database, *, kb: str, models_dir: Path, config: LearnConfig,
                    force: bool = False, progress: Progress | None = None) -> Outcome:
    """One feedback update of ``kb``'s reasoner (the module's steps); ``force``: whatever is new."""
    say = progress or (lambda text: log.info("learn reasoner %s: %s", kb, text))
    t0 = time.perf_counter()
    outcome, parent, rows, watermark = what_is_new(db, "reasoner", kb, feedback_since,
                                                   1 if force else config.min_feedback)
    if watermark is None:
        return outcome
    new = questions_from(rows)
    if parent is None:
        say(f"first router and reasoner, from {len(new)} feedback questions")
        versions = train_kb(["router", "reasoner"], store=store, embedder=embedder, db=db,
                            home=models_dir.parent, job=Job(kb, ["feedback"], train=new), epochs=config.epochs,
                            seed=config.seed, show=False, watermark=watermark)
        outcome.result, outcome.version, outcome.seconds = "first", versions["reasoner"], time.perf_counter() - t0
        return outcome

    artefact = models_dir / f"reasoner-{kb}-{time.strftime('%Y%m%d%H%M%S')}-u.pt"
    version = start_update(db, kind="reasoner", kb=kb, parent=parent.id, watermark=watermark, artefact=artefact)
    say = reporter(db, version, say)
    say(f"loading {parent.id}")
    reasoner = load_model(Path(parent.artefact))
    if not isinstance(reasoner, PathReasoner):
        raise ValueError(f"{parent.id}'s artefact {parent.artefact} holds no reasoner")
    router_row = active_version(db, kind="router", kb=kb)
    router = load_model(Path(router_row.artefact)) if router_row is not None else None
    features = RelationFeatures(embedder.encode)
    rng = random.Random(config.seed)
    rng.shuffle(new)
    n_held = max(1, int(config.held_out * len(new))) if len(new) > 1 else 0
    held_qas, learn_qas = new[:n_held], new[n_held:]
    old_rows, _ = feedback_since(db, kb, None, until=watermark_of(parent))
    old = questions_from(old_rows)
    probe_qas = _sample(old, config.probe, config.seed)
    replay_qas = _sample(old, config.replay, config.seed + 1)

    def samples(qas: list[QA], part: str) -> list[Sample]:
        return prepare(store, embedder, kb, qas, show=False, desc=part,
                       router=router if isinstance(router, RelationRouter) else None, features=features)

    say(f"{len(rows)} answers marked since {watermark_of(parent)}: {len(learn_qas)} questions to learn, "
        f"{len(held_qas)} held out, {len(replay_qas)} replayed, a probe of {len(probe_qas)}")
    held, learn, probe, replay = (samples(q, p) for q, p in ((held_qas, "held out"), (learn_qas, "new"),
                                                            (probe_qas, "probe"), (replay_qas, "replay")))
    parent_old, parent_new = _hits(reasoner, probe, features), _hits(reasoner, held, features)

    anchor_file = ewc_path(Path(parent.artefact))
    if anchor_file.exists():
        ewc = ElasticWeights.load(anchor_file)
        ewc.lam = config.ewc_lambda
    else:
        ewc = ElasticWeights.from_model(reasoner, _fisher(reasoner, replay or learn, features), lam=config.ewc_lambda)
    say(f"training on {len(learn)} new and {len(replay)} replayed questions")
    fit(reasoner, learn + replay, features, epochs=config.epochs, seed=config.seed, show=False, ewc=ewc)
    cand_old, cand_new = _hits(reasoner, probe, features), _hits(reasoner, held, features)
    gates = judge(metric="hits_at_1", probe=(cand_old, parent_old, len(probe)),
                  new=(cand_new, parent_new, len(held)), retention=config.retention)
    say(f"gates: retention {cand_old:.3f} vs {parent_old:.3f}, new {cand_new:.3f} vs {parent_new:.3f} → "
        f"{'passed' if gates['passed'] else 'failed'}")

    say("saving the candidate and its Fisher information")
    metrics = {"feedback": len(rows), "learned_questions": len(learn), "replayed_questions": len(replay),
               "held_out_questions": len(held), "probe_questions": len(probe), "epochs": config.epochs,
               "ewc_lambda": config.ewc_lambda, "router": router_row.id if router_row else None,
               "readout": reasoner.config.readout, "train_seconds": round(time.perf_counter() - t0, 1)}
    save_model(reasoner, artefact, kb=kb, metrics=metrics)
    ewc.consolidate(reasoner, _fisher(reasoner, learn + replay, features),
                    gamma=config.ewc_gamma).save(ewc_path(artefact))
    finish_update(db, version, metrics=metrics, gates=gates, ab_share=config.ab_share)
    outcome.result = ("on_trial" if config.ab_share else "promoted") if gates["passed"] else "failed"
    outcome.version, outcome.gates, outcome.seconds = version, gates, time.perf_counter() - t0
    return outcome


def _sample(items: list[QA], n: int, seed: int) -> list[QA]:
    return list(items) if len(items) <= n else random.Random(seed).sample(items, n)


def _hits(reasoner: PathReasoner, samples: Sequence[Sample], features: RelationFeatures) -> float:
    """hits@1 on the questions that linked (0 on none)."""
    return hits_at_1(reasoner, samples, features) if samples else 0.0


def _fisher(model: PathReasoner, samples: Sequence[Sample], features: RelationFeatures,
            batch_size: int = 32) -> dict[str, Any]:
    """The reasoner's empirical Fisher on ``samples`` (those with a reachable answer), its own loss."""
    usable = [s for s in samples if s.answers]
    batches = [collate(usable[i:i + batch_size], features) for i in range(0, len(usable), batch_size)]
    if not batches:  # nothing to measure: no weight is held
        return {name: p.detach() * 0 for name, p in model.named_parameters()}
    model.eval()
    return empirical_fisher(model, batches, lambda c: model.loss(c, model(c)))
