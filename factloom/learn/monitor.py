"""The model monitor: each period it judges every kb's active learned versions against their
parents, rolls a kb back after repeated failing periods, and decides A/B trials.

The beat runs :func:`look` every ``monitor_period_s`` seconds. For each active ``router``,
``reasoner`` and ``scorer`` version with a kb, the period since the last look **fails** when

- a learn update of that kind and kb failed its gates or erred (the learn worker records each in
  Redis: :func:`record_learn_failure`);
- its error rate exceeds its parent's by more than ``monitor_error_margin`` (with at least
  ``monitor_min_questions`` questions answered in the period);
- its p95 latency exceeds its parent's by more than ``monitor_latency_margin`` (a share) and 50 ms
  (same minimum);
- its feedback hits@1 (answers marked right among those it gave, ``reasoner`` only) is lower than its
  parent's by more than ``monitor_hits_margin`` (with at least ``monitor_min_feedback`` marked);
- its verdict mix (``scorer`` only: the fused verdicts of the facts it judged) decided a share of the
  facts automatically lower than its parent's by more than ``monitor_verdict_margin``, or rejected
  a share higher by more than that (with at least ``monitor_min_questions`` facts).

The parent's figures are everything it answered while it served (:mod:`factloom.learn.serving`)
and all the feedback on its answers; a parent without figures compares with nothing, so only the
learn failures and an absolute error rate over ``monitor_error_margin`` count. A period with
evidence (questions, feedback or learn outcomes) and no failure **passes** and clears the count; one
without evidence changes nothing. After ``monitor_fail_periods`` failing periods in a row the kb
rolls back to the version's last good one (:func:`factloom.ledger.rollback`, audited as
``model.rollback``; counted in ``factloom_model_rollbacks_total``, which the alert rule watches).

**A/B trials** are decided by a non-inferiority test on feedback hits@1 (trial − active ≥ −``ab_margin``)
with Hoeffding intervals whose error budget is spent across looks (look *k* spends
α·1/(k(k+1)), summing to α = ``ab_alpha``): at every look, with probability at least 1 − α over the
whole trial, the difference lies inside the interval, so stopping at any look keeps the guarantee.
The trial is **promoted** when the interval's lower end clears −margin, **stopped** when its upper end
falls below −margin, or when its error rate exceeds the active version's by ``monitor_error_margin``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import redis
from sqlalchemy import Integer, func, select

from factloom.config import Settings, from_settings, setting
from factloom.learn.serving import Figures, merged, read, read_verdicts
from factloom.ledger import (
    AnswerFeedback,
    Database,
    ModelVersion,
    VersionStatus,
    activate_version,
    end_trial,
    rollback,
)
from factloom.metrics import MODEL_FAILING_PERIODS, MODEL_ROLLBACKS

__all__ = ["MonitorConfig", "Judgement", "look", "record_learn_failure", "hoeffding_interval", "KINDS",
           "feedback_hits"]

log = logging.getLogger(__name__)

KINDS = ("router", "reasoner", "scorer")
ACTOR = "monitor"
_LAST_LOOK = "factloom:monitor:last-look"
_LATENCY_FLOOR_MS = 50.0


@dataclass(frozen=True)
class MonitorConfig:
    """The ``monitor_*`` and ``ab_*`` settings (``factloom/config.py`` says what each means)."""

    fail_periods: int = setting("monitor_fail_periods")
    # a look sooner than 0.8 periods after the last is skipped: looks queued behind other work and run
    # back to back must not count as several periods (0: every look counts)
    period_s: float = setting("monitor_period_s", default=0.0)
    min_questions: int = setting("monitor_min_questions")
    min_feedback: int = setting("monitor_min_feedback")
    error_margin: float = setting("monitor_error_margin")
    latency_margin: float = setting("monitor_latency_margin")
    hits_margin: float = setting("monitor_hits_margin")
    verdict_margin: float = setting("monitor_verdict_margin")
    ab_auto: bool = setting("ab_auto")
    ab_margin: float = setting("ab_margin")
    ab_alpha: float = setting("ab_alpha")

    @classmethod
    def of(cls, settings: Settings) -> MonitorConfig:
        return from_settings(cls, settings)


@dataclass
class Judgement:
    """One active version's period: ``passed``, ``failed`` or ``unknown`` (no evidence), and why."""

    kb: str
    kind: str
    version: str
    state: str
    reasons: list[str] = field(default_factory=list)
    failing: int = 0  # failing periods in a row, this one included
    rolled_back_to: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kb": self.kb, "kind": self.kind, "version": self.version, "state": self.state,
                "reasons": self.reasons, "failing": self.failing, "rolled_back_to": self.rolled_back_to}


def _state_key(kb: str, kind: str) -> str:
    return f"factloom:monitor:{kb}:{kind}"


def _failures_key(kb: str, kind: str) -> str:
    return f"factloom:learn:failures:{kb}:{kind}"


def record_learn_failure(client: redis.Redis, kb: str, kind: str, version: str | None, why: str) -> None:
    """Note that an update of ``kind`` for ``kb`` failed its gates or erred (the monitor counts them)."""
    now = time.time()
    key = _failures_key(kb, kind)
    client.zadd(key, {f"{now:.6f} {version or '-'} {why[:200]}": now})
    client.zremrangebyscore(key, "-inf", now - 7 * 24 * 3600)


def hoeffding_interval(hits_t: int, n_t: int, hits_a: int, n_a: int, *, look: int,
                       alpha: float) -> tuple[float, float]:
    """An interval for (trial − active) hits@1 that holds with probability ≥ 1 − α over every look
    together: look ``look`` (1, 2, …) spends α/(look·(look+1)), half on each arm."""
    spent = alpha / (look * (look + 1))
    radius_t = math.sqrt(math.log(4 / spent) / (2 * n_t))
    radius_a = math.sqrt(math.log(4 / spent) / (2 * n_a))
    diff = hits_t / n_t - hits_a / n_a
    return diff - radius_t - radius_a, diff + radius_t + radius_a


def feedback_hits(db: Database, kb: str, version: str, since: datetime | None = None) -> tuple[int, int]:
    """(marked right, marked) among the answers ``version`` gave on ``kb`` (since ``since``)."""
    query = select(func.count(), func.coalesce(func.sum(AnswerFeedback.correct.cast(Integer)), 0)).where(
        AnswerFeedback.kb == kb, AnswerFeedback.reasoner_version == version)
    if since is not None:
        query = query.where(AnswerFeedback.created_at > since)
    with db.session() as session:
        n, right = session.execute(query).one()
    return int(right), int(n)


def _service(client: redis.Redis, kb: str, version: str) -> Figures:
    return merged(read(client, kb, version).values())


def _judge(db: Database, client: redis.Redis, config: MonitorConfig, row: ModelVersion,
           state: dict[str, str]) -> Judgement:
    kb, kind = str(row.kb), row.kind
    judgement = Judgement(kb, kind, row.id, "unknown")
    seen = state.get("version") == row.id
    # the period: since the last look at this version, or (the first look) since it was created
    last = float(state["looked_at"]) if seen else row.created_at.timestamp()
    now = time.time()
    evidence = False

    failures = client.zrangebyscore(_failures_key(kb, kind), f"({last}", now)
    if failures:
        evidence = True
        judgement.reasons.append(f"{len(failures)} learn update(s) failed")

    now_figures = read(client, kb, row.id)["active"]
    before = Figures.of_fields({k[5:]: int(v) for k, v in state.items() if k.startswith("snap:")}, "active") \
        if seen else Figures()
    period = now_figures.minus(before)
    parent = _service(client, kb, row.parent) if row.parent else Figures()
    if period.questions >= config.min_questions:
        evidence = True
        limit = (parent.error_rate if parent.questions else 0.0) + config.error_margin
        if period.error_rate > limit:
            judgement.reasons.append(f"error rate {period.error_rate:.3f} > {limit:.3f}")
        p95, parent_p95 = period.p95_ms, parent.p95_ms
        if p95 is not None and parent_p95 is not None and parent.questions >= config.min_questions \
                and p95 > parent_p95 * (1 + config.latency_margin) and p95 - parent_p95 > _LATENCY_FLOOR_MS:
            judgement.reasons.append(f"p95 latency {p95:.0f} ms > {parent_p95:.0f} ms × {1 + config.latency_margin:g}")

    if kind == "reasoner":
        right, marked = feedback_hits(db, kb, row.id, datetime.fromtimestamp(last, tz=timezone.utc))
        if marked >= config.min_feedback:
            evidence = True
            p_right, p_marked = feedback_hits(db, kb, row.parent) if row.parent else (0, 0)
            if p_marked >= config.min_feedback and right / marked < p_right / p_marked - config.hits_margin:
                judgement.reasons.append(f"feedback hits@1 {right / marked:.3f} < parent's "
                                         f"{p_right / p_marked:.3f} − {config.hits_margin:g}")

    mix = read_verdicts(client, kb, row.id) if kind == "scorer" else Counter()
    if mix:
        period_mix = mix - Counter({k[6:]: int(v) for k, v in state.items() if k.startswith("vsnap:")} if seen else {})
        parent_mix = read_verdicts(client, kb, row.parent) if row.parent else Counter()
        n, parent_n = sum(period_mix.values()), sum(parent_mix.values())
        if n >= config.min_questions:
            evidence = True
            if parent_n >= config.min_questions:
                auto, parent_auto = ((m["accepted"] + m["rejected"]) / max(sum(m.values()), 1)
                                     for m in (period_mix, parent_mix))
                if auto < parent_auto - config.verdict_margin:
                    judgement.reasons.append(f"decided automatically {auto:.2f} < parent's {parent_auto:.2f} − "
                                             f"{config.verdict_margin:g}")
                if period_mix["rejected"] / n > parent_mix["rejected"] / parent_n + config.verdict_margin:
                    judgement.reasons.append(f"rejected {period_mix['rejected'] / n:.2f} > parent's "
                                             f"{parent_mix['rejected'] / parent_n:.2f} + {config.verdict_margin:g}")

    if judgement.reasons:
        judgement.state = "failed"
    elif evidence:
        judgement.state = "passed"
    state_fields: dict[str | bytes, str | int | float] = {"version": row.id, "looked_at": now}
    state_fields.update({f"snap:{k}": v for k, v in now_figures.as_fields("active").items()})
    state_fields.update({f"vsnap:{k}": v for k, v in mix.items()})
    failing = int(state.get("failing", 0)) if seen else 0
    failing = failing + 1 if judgement.state == "failed" else 0 if judgement.state == "passed" else failing
    judgement.failing = state_fields["failing"] = failing
    client.hset(_state_key(kb, kind), mapping=state_fields)  # type: ignore[arg-type]
    return judgement


def _decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()}


def look(db: Database, client: redis.Redis, config: MonitorConfig) -> list[dict[str, Any]]:
    """One period: judge every active version, roll back where it failed ``fail_periods`` times in a
    row, decide the A/B trials; what was judged and done, as dicts (none when the last look was less
    than 0.8 periods ago)."""
    now = time.time()
    last = client.get(_LAST_LOOK)
    if config.period_s and last is not None and now - float(last) < 0.8 * config.period_s:
        return []
    client.set(_LAST_LOOK, now)
    with db.session() as session:
        rows = list(session.scalars(select(ModelVersion).where(
            ModelVersion.kind.in_(KINDS), ModelVersion.kb.is_not(None),
            ModelVersion.status.in_([VersionStatus.active.value, VersionStatus.ab.value]))))
        session.expunge_all()
    out: list[dict[str, Any]] = []
    for row in [r for r in rows if r.status == VersionStatus.active.value]:
        judgement = _judge(db, client, config, row, _decode(client.hgetall(_state_key(str(row.kb), row.kind))))
        MODEL_FAILING_PERIODS.labels(kb=judgement.kb, kind=judgement.kind).set(judgement.failing)
        if judgement.state == "failed" and judgement.failing >= config.fail_periods:
            reason = (f"{judgement.failing} failing periods in a row; last: " + "; ".join(judgement.reasons))
            try:
                _, judgement.rolled_back_to = rollback(db, kind=row.kind, kb=str(row.kb), actor=ACTOR, reason=reason)
            except LookupError as exc:
                log.error("kb %s: %s %s keeps failing and cannot be rolled back: %s", row.kb, row.kind, row.id, exc)
            else:
                client.delete(_state_key(str(row.kb), row.kind))
                MODEL_ROLLBACKS.labels(kb=judgement.kb, kind=judgement.kind).inc()
                log.warning("kb %s rolled back %s %s → %s: %s", row.kb, row.kind, row.id, judgement.rolled_back_to,
                            reason)
        if judgement.state != "unknown" or judgement.rolled_back_to:
            log.info("monitor: %s", judgement.as_dict())
        out.append(judgement.as_dict())
    if config.ab_auto:
        for row in [r for r in rows if r.status == VersionStatus.ab.value]:
            decided = _decide_ab(db, client, config, row)
            if decided:
                out.append(decided)
    return out


def _decide_ab(db: Database, client: redis.Redis, config: MonitorConfig, row: ModelVersion) -> dict[str, Any] | None:
    """One look of the sequential test of an A/B trial; the decision as a dict, ``None`` while open."""
    kb, key = str(row.kb), f"factloom:monitor:ab:{row.id}"
    state = _decode(client.hgetall(key))
    if "started" not in state:
        client.hset(key, mapping={"started": time.time(), "looks": 0})
        return None
    started = datetime.fromtimestamp(float(state["started"]), tz=timezone.utc)
    with db.session() as session:
        active = session.scalars(select(ModelVersion).where(
            ModelVersion.kind == row.kind, ModelVersion.kb == row.kb,
            ModelVersion.status == VersionStatus.active.value)).first()
    if active is None:
        return None
    trial_figures, active_figures = read(client, kb, row.id)["ab"], read(client, kb, active.id)["active"]
    decision, why = None, ""
    if trial_figures.questions >= config.min_questions and \
            trial_figures.error_rate > active_figures.error_rate + config.error_margin:
        decision, why = "stop", (f"error rate {trial_figures.error_rate:.3f} > active's "
                                 f"{active_figures.error_rate:.3f} + {config.error_margin:g}")
    elif row.kind == "reasoner":
        hits_t, n_t = feedback_hits(db, kb, row.id, started)
        hits_a, n_a = feedback_hits(db, kb, active.id, started)
        if n_t and n_a:
            looks = int(state.get("looks", 0)) + 1
            client.hset(key, "looks", looks)
            low, high = hoeffding_interval(hits_t, n_t, hits_a, n_a, look=looks, alpha=config.ab_alpha)
            figures = (f"hits@1 {hits_t}/{n_t} vs {hits_a}/{n_a}, difference in [{low:.3f}, {high:.3f}] "
                       f"at look {looks}")
            if low >= -config.ab_margin:
                decision, why = "promote", f"not worse: {figures}"
            elif high < -config.ab_margin:
                decision, why = "stop", f"worse: {figures}"
    if decision is None:
        return None
    if decision == "promote":
        activate_version(db, row.id, actor=ACTOR)
    else:
        end_trial(db, row.id, actor=ACTOR, reason=why)
    client.delete(key)
    log.warning("kb %s: A/B trial of %s %s: %s (%s)", kb, row.kind, row.id, decision, why)
    return {"kb": kb, "kind": row.kind, "version": row.id, "ab": decision, "why": why}
