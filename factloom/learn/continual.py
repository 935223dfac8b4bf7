"""Continual learning of the plausibility scorer: new committed facts are learned with Elastic Weight
Consolidation against the active scorer, the candidate is gated and registered.

One update of a kb (:func:`update_scorer`), as the ``learn`` task runs it:

1. The kb's facts committed since its active scorer's watermark are read from the ledger. Fewer than
   ``min_facts`` (or checks still running, :func:`scorer_due`): nothing to do. No active scorer yet:
   the first one is trained from scratch on the graph's accepted facts
   (:func:`~factloom.learn.verification.train_scorer`).
2. A tenth of the new facts is held out; the active scorer is loaded, its tables grow by the new
   entities and relations (old rows unchanged), and it learns the other new facts beside every fact
   it knew (:func:`learn_facts`, on the :class:`ScorerSchedule`), with the penalty
   ``λ/2 · Σᵢ Fᵢ (θᵢ − θ*ᵢ)²`` anchored at the parent (:mod:`factloom.model.ewc`).
3. Gates (:mod:`factloom.learn.gates`): filtered MRR on the parent's probe (facts of what it knows
   that it never trained on, :mod:`factloom.learn.artefacts`) at least ``retention`` of the
   parent's; filtered MRR on the held-out new facts above the parent's.
4. The candidate is saved with its consolidated Fisher (``F ← γ·F_parent + F_new``) beside the
   artefact, and registered with its parent, watermark and gates: ``active`` when it passed, else a
   ``candidate`` (a failed update) while the parent keeps serving.

An update is idempotent by (parent, watermark): run twice on the same facts, the second finds the
first's version and returns it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import func, select

from factloom.learn.artefacts import ewc_path, load_probe, save_probe
from factloom.learn.gates import judge
from factloom.learn.verification import corrupt, train_scorer
from factloom.ledger import (
    Database,
    FactSubmission,
    ModelVersion,
    Status,
    active_version,
    find_update,
    finish_update,
    note_progress,
    start_update,
)

__all__ = ["LearnConfig", "ScorerSchedule", "learn_facts", "Outcome", "Progress", "reporter", "update_scorer",
           "committed_since", "new_facts", "scorer_due", "filtered_mrr", "what_is_new", "tried"]

log = logging.getLogger(__name__)

Triple = tuple[str, str, str]
Progress = Callable[[str], None]
T = TypeVar("T")
# what is new to a version: the items after an instant (all where ``None``), and the latest instant among them
Since = Callable[[Database, str, datetime | None], tuple[list[T], datetime | None]]


@dataclass(frozen=True, slots=True)
class ScorerSchedule:
    """How a scorer update trains (:func:`learn_facts`); the ``learn_scorer_*`` settings. The defaults
    are what ``factloom bench continual`` measured best within a quarter of re-training's time."""

    new_epochs: int = 1  # passes over the new facts that name a new entity or relation, first
    epochs: int = 2  # then passes over the new facts and every fact the parent knew
    ewc_lambda: float = 0.01


def learn_facts(scorer: Any, new: Sequence[Triple], old: Sequence[Triple], *, known_before: tuple[int, int],
                schedule: ScorerSchedule, ewc: Any, seed: int, **fit: Any) -> None:
    """Teach a grown ``scorer`` the ``new`` facts without losing the ``old`` ones it knew (empty: plain
    fine-tuning): ``schedule.new_epochs`` passes over the new facts that name an entity or relation
    it did not know (``known_before``: how many entities and relations it knew before it grew), so
    their rows leave their near-zero start, then ``schedule.epochs`` over the new and the old facts
    together, each with the EWC penalty ``ewc`` (``None``: none). ``fit``: the rest of
    :meth:`~factloom.model.scorer.ComplExScorer.fit`'s keywords (``negatives``, ``lr`` …)."""
    n_ent, n_rel = known_before
    fresh = [(s, p, o) for s, p, o in new
             if scorer.entities[s] >= n_ent or scorer.entities[o] >= n_ent or scorer.relations[p] >= n_rel]
    if schedule.new_epochs and fresh:
        scorer.fit(fresh, epochs=schedule.new_epochs, seed=seed + 100, keep_known=True, ewc=ewc, **fit)
    scorer.fit(list(new) + list(old), epochs=schedule.epochs, seed=seed, keep_known=True, ewc=ewc, **fit)


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """How a kb's models learn; the ``learn_*`` settings (``factloom/config.py``)."""

    min_facts: int = 2000  # newly committed facts that start a scorer update (or a kb's first scorer)
    min_feedback: int = 50  # new feedback answers that start a router / reasoner update
    scorer: ScorerSchedule = field(default_factory=ScorerSchedule)
    replay: int = 5000  # old questions replayed beside the new ones; facts (questions) per Fisher
    epochs: int = 10  # a reasoner update's passes over its questions
    ewc_lambda: float = 10.0  # a reasoner update's λ
    ewc_gamma: float = 1.0
    retention: float = 0.95
    probe: int = 1000  # old facts (questions) in the retention probe
    held_out: float = 0.1  # share of the new facts (questions) held out for the new-knowledge gate
    seed: int = 0
    # a candidate that passed its gates goes on an A/B trial with this share (0: it serves at once)
    ab_share: float = 0.0

    @classmethod
    def of(cls, settings: Any) -> LearnConfig:
        scorer = ScorerSchedule(new_epochs=settings.learn_scorer_new_epochs, epochs=settings.learn_scorer_epochs,
                                ewc_lambda=settings.learn_scorer_ewc_lambda)
        return cls(min_facts=settings.learn_min_facts, min_feedback=settings.learn_min_feedback, scorer=scorer,
                   replay=settings.learn_replay, epochs=settings.learn_epochs,
                   ewc_lambda=settings.learn_ewc_lambda, ewc_gamma=settings.learn_ewc_gamma,
                   retention=settings.learn_retention,
                   ab_share=settings.ab_share if settings.learn_rollout == "ab" else 0.0)


@dataclass
class Outcome:
    """What one update did: ``skipped`` (too little new), ``done`` (already learned), ``first``,
    ``promoted``, ``on_trial`` (passed, on an A/B trial) or ``failed`` (gates not passed; the candidate
    stays a candidate)."""

    kb: str
    kind: str
    result: str
    version: str | None = None
    parent: str | None = None
    new_items: int = 0
    gates: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"kb": self.kb, "kind": self.kind, "result": self.result, "version": self.version,
                "parent": self.parent, "new_items": self.new_items, "gates": self.gates,
                "seconds": round(self.seconds, 1)}


def watermark_of(version: ModelVersion | None) -> datetime | None:
    """Facts committed after this instant are new to ``version`` (a hand-trained one: after its creation)."""
    if version is None:
        return None
    return version.watermark or version.created_at


def committed_since(db: Database, kb: str, after: datetime | None) -> tuple[list[Triple], datetime | None]:
    """The distinct facts of ``kb`` committed after ``after`` (all where ``None``), and the latest
    commit instant among them (the watermark of a version that learns them)."""
    query = select(FactSubmission.subject, FactSubmission.predicate, FactSubmission.object,
                   FactSubmission.committed_at).where(FactSubmission.kb == kb,
                                                      FactSubmission.status == Status.committed)
    if after is not None:
        query = query.where(FactSubmission.committed_at > after)
    with db.session() as session:
        rows = session.execute(query).all()
    triples = list(dict.fromkeys((s, p, o) for s, p, o, _ in rows))
    latest = max((at for *_, at in rows if at is not None), default=None)
    return triples, latest


def new_facts(db: Database, kb: str) -> tuple[int, datetime | None]:
    """How many of ``kb``'s submissions were committed since its active scorer's watermark (all
    committed ones where it has no scorer), and the latest commit among them."""
    after = watermark_of(active_version(db, kind="scorer", kb=kb))
    query = select(func.count(), func.max(FactSubmission.committed_at)).where(
        FactSubmission.kb == kb, FactSubmission.status == Status.committed)
    if after is not None:
        query = query.where(FactSubmission.committed_at > after)
    with db.session() as session:
        count, latest = session.execute(query).one()
    return int(count or 0), latest


def tried(db: Database, *, kind: str, kb: str, watermark: datetime | None) -> bool:
    """Whether an update of ``kb``'s active ``kind`` up to ``watermark`` has finished already (it
    failed its gates, or it would be active): the plan does not queue it again."""
    parent = active_version(db, kind=kind, kb=kb)
    return watermark is not None and find_update(
        db, kind=kind, kb=kb, parent=parent.id if parent else None, watermark=watermark) is not None


def scorer_due(db: Database, *, min_facts: int) -> list[str]:
    """The kbs with ``min_facts`` or more :func:`new_facts`, no submission waiting for its checks, and
    no finished update on those facts (one that failed its gates waits for more facts).

    A kb in the middle of a load waits for its checks to finish: a scorer learned from the first
    part of a load would judge the rest (on the MetaQA demo, one learned from its first 14,000 facts
    sent 68,000 of the other 114,000 to review), and the checks need the cores meanwhile."""
    with db.session() as session:
        kbs = set(session.scalars(select(FactSubmission.kb).distinct()))
        busy = set(session.scalars(select(FactSubmission.kb).distinct().where(
            FactSubmission.status.in_([Status.pending, Status.checking]))))
    due = []
    for kb in sorted(kbs - busy):
        count, latest = new_facts(db, kb)
        if count >= min_facts and not tried(db, kind="scorer", kb=kb, watermark=latest):
            due.append(kb)
    return due


def filtered_mrr(scorer: Any, triples: Sequence[Triple], *, candidates: int | None = None) -> float:
    """Mean reciprocal rank of each fact's tail and head, other known facts removed (the
    link-prediction protocol), among the first ``candidates`` entities (all where ``None``); a fact
    the scorer cannot judge counts 0."""
    if not triples:
        return 0.0
    return float(scorer.reciprocal_ranks(list(triples), candidates=candidates).mean())


def what_is_new(db: Database, kind: str, kb: str, since: Since[T],
                minimum: int) -> tuple[Outcome, ModelVersion | None, list[T], datetime | None]:
    """How an update of ``kb``'s ``kind`` starts: the outcome so far, the active version (the parent),
    the items ``since`` finds new to it, and their watermark (the latest instant among them).

    The watermark is ``None`` where there is nothing to train: fewer than ``minimum`` new items
    (``outcome`` stays ``skipped``), or a finished version learned them from the same parent already
    (``done``, idempotence)."""
    parent = active_version(db, kind=kind, kb=kb)
    new, watermark = since(db, kb, watermark_of(parent))
    outcome = Outcome(kb, kind, "skipped", parent=parent.id if parent else None, new_items=len(new))
    if watermark is None or len(new) < minimum:
        return outcome, parent, new, None
    done = find_update(db, kind=kind, kb=kb, parent=outcome.parent, watermark=watermark)
    if done is not None:
        outcome.result, outcome.version, outcome.gates = "done", done.id, dict(done.gates or {})
        return outcome, parent, new, None
    return outcome, parent, new, watermark


def update_scorer(store: Any, db: Database, *, kb: str, models_dir: Path, config: LearnConfig,
                  force: bool = False, progress: Progress | None = None) -> Outcome:
    """One continual update of ``kb``'s scorer (the module's steps); ``force`` learns whatever is new,
    however little."""
    from factloom.model.ewc import ElasticWeights
    from factloom.model.scorer import ComplExScorer

    say = progress or (lambda text: log.info("learn scorer %s: %s", kb, text))
    t0 = time.perf_counter()
    outcome, parent, new, watermark = what_is_new(db, "scorer", kb, committed_since, 1 if force else config.min_facts)
    if watermark is None:
        return outcome
    if parent is None:
        say(f"first scorer, from {len(new)} committed facts")
        version, metrics = train_scorer(store, db, kb=kb, models_dir=models_dir, progress=False,
                                        watermark=watermark, negatives=_negatives_for(len(new)))
        artefact = Path(_artefact(db, version))
        scorer = ComplExScorer.load(artefact)
        fisher = scorer.fisher(_sample(_known(scorer), config.replay, config.seed),
                               negatives=_negatives_for(len(scorer.entities)))
        ElasticWeights.from_model(scorer.model, fisher, lam=config.scorer.ewc_lambda).save(ewc_path(artefact))
        outcome.result, outcome.version, outcome.seconds = "first", version, time.perf_counter() - t0
        return outcome

    models_dir.mkdir(parents=True, exist_ok=True)
    artefact = models_dir / f"scorer-{kb}-{time.strftime('%Y%m%d%H%M%S')}-u.pt"
    version = start_update(db, kind="scorer", kb=kb, parent=parent.id, watermark=watermark, artefact=artefact)
    say = reporter(db, version, say)
    say(f"{len(new)} new facts since {watermark_of(parent)}; loading {parent.id}")
    scorer = ComplExScorer.load(Path(parent.artefact))
    old = _known(scorer)
    # what the parent knows beyond what it memorised: its held-out facts (a scorer from before probes
    # were kept: a sample of its training facts)
    probe = load_probe(Path(parent.artefact)) or _sample(old, config.probe, config.seed)
    rng = random.Random(config.seed)
    shuffled = list(new)
    rng.shuffle(shuffled)
    n_held = min(1000, max(1, int(config.held_out * len(shuffled)))) if len(shuffled) > 1 else 0
    held, learn = shuffled[:n_held], shuffled[n_held:]
    # old knowledge is ranked among the entities the parent knew, before and after (as continual
    # link prediction ranks an old snapshot's test facts among the entities seen up to it)
    known_entities, known_relations = len(scorer.entities), len(scorer.relations)
    parent_old, parent_new = filtered_mrr(scorer, probe), filtered_mrr(scorer, held)

    anchor_file = ewc_path(Path(parent.artefact))
    if anchor_file.exists():
        ewc = ElasticWeights.load(anchor_file)
        ewc.lam = config.scorer.ewc_lambda
    else:  # a hand-trained parent: its Fisher from the facts it knew
        say("computing the parent's Fisher information")
        fisher = scorer.fisher(_sample(old, config.replay, config.seed),
                               negatives=_negatives_for(len(scorer.entities)))
        ewc = ElasticWeights.from_model(scorer.model, fisher, lam=config.scorer.ewc_lambda)
    # every new name gets a row, a held-out fact's too: the gate then asks what the update taught about it
    added = scorer.extend([x for s, _, o in shuffled for x in (s, o)], [p for _, p, _ in shuffled])
    # every old fact is replayed: a sample forgets what the penalty alone cannot hold (bench continual)
    replay = old
    say(f"tables grown by {added[0]} entities, {added[1]} relations; training on {len(learn)} new "
        f"+ {len(replay)} replayed facts")
    learn_facts(scorer, learn, replay, known_before=(known_entities, known_relations), schedule=config.scorer,
                ewc=ewc, seed=config.seed, progress=False, negatives=_negatives_for(len(scorer.entities)))
    _calibrate(scorer, held or learn[:1000], rng)
    cand_old, cand_new = filtered_mrr(scorer, probe, candidates=known_entities), filtered_mrr(scorer, held)
    gates = judge(metric="filtered_mrr", probe=(cand_old, parent_old, len(probe)),
                  new=(cand_new, parent_new, len(held)), retention=config.retention)
    say(f"gates: retention {cand_old:.4f} vs {parent_old:.4f}, new {cand_new:.4f} vs {parent_new:.4f} → "
        f"{'passed' if gates['passed'] else 'failed'}")

    say("saving the candidate and its Fisher information")
    scorer.save(artefact)
    fisher = scorer.fisher(_sample(learn + replay, config.replay, config.seed),
                           negatives=_negatives_for(len(scorer.entities)))
    scorer.align(ewc).consolidate(scorer.model, fisher,
                                  gamma=config.ewc_gamma).save(ewc_path(artefact))
    # the next probe: old and new held-out facts in the proportion the candidate learned them
    n_old = round(config.probe * len(old) / (len(old) + len(learn)))
    save_probe(artefact, _sample(probe, n_old, config.seed) + _sample(held, config.probe - n_old, config.seed))
    metrics = {"facts": len(scorer.known), "new_facts": len(new), "learned_facts": len(learn),
               "replayed_facts": len(replay), "held_out_facts": len(held), "entities": len(scorer.entities),
               "new_entities": added[0], "new_relations": added[1],
               "new_epochs": config.scorer.new_epochs, "epochs": config.scorer.epochs,
               "ewc_lambda": config.scorer.ewc_lambda, "ewc_gamma": config.ewc_gamma, "probe_facts": len(probe),
               "train_seconds": round(time.perf_counter() - t0, 1)}
    finish_update(db, version, metrics=metrics, gates=gates, ab_share=config.ab_share)
    outcome.result = ("on_trial" if config.ab_share else "promoted") if gates["passed"] else "failed"
    outcome.version, outcome.gates, outcome.seconds = version, gates, time.perf_counter() - t0
    return outcome


def reporter(db: Database, version: str, log_it: Progress) -> Progress:
    """Progress to the log and to the candidate's registry row."""
    def say(text: str) -> None:
        log_it(text)
        note_progress(db, version, text)
    return say


def _negatives_for(entities: int) -> int | None:
    """A sampled softmax where the full one over every entity would be slow (MetaQA's 43,000)."""
    return 1000 if entities > 10_000 else None


def _known(scorer: Any) -> list[Triple]:
    names = {i: e for e, i in scorer.entities.items()}
    rels = {i: r for r, i in scorer.relations.items()}
    return [(names[int(h)], rels[int(r)], names[int(t)]) for h, r, t in scorer.known]


def _sample(triples: Sequence[Triple], n: int, seed: int) -> list[Triple]:
    return list(triples) if len(triples) <= n else random.Random(seed).sample(list(triples), n)


def _calibrate(scorer: Any, facts: Sequence[Triple], rng: random.Random) -> None:
    """Per-relation Platt calibration again: the raw scores moved. On held-out new facts and one
    corrupted triple each (as :func:`~factloom.learn.verification.train_scorer` does)."""
    known = set(_known(scorer)) | set(facts)
    entities = list(scorer.entities)
    fakes = corrupt(list(facts), entities, known, rng)
    scorer.calibrate(list(facts) + fakes, [1] * len(facts) + [0] * len(fakes))


def _artefact(db: Database, version: str) -> str:
    with db.session() as session:
        row = session.get(ModelVersion, version)
        assert row is not None
        return row.artefact
