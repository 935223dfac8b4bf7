"""The model registry for the API and the CLI: list versions, activate one, ask for an update."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

import redis
from sqlalchemy import select

from factloom.learn import UPDATES
from factloom.learn.serving import Figures, read
from factloom.ledger import Database, ModelVersion, activate_version, end_trial, list_versions, rollback, start_trial
from factloom.platform.errors import Conflict, NotFound, found

__all__ = ["list_models", "kb_of", "activate", "unlearned", "request_update", "try_version", "stop_trial",
           "roll_back", "figures", "get"]


@contextlib.contextmanager
def _registry_problems() -> Iterator[None]:
    """The registry's refusals as problems: an unknown version 404, a version that cannot do it 409."""
    try:
        yield
    except LookupError as exc:
        raise NotFound(str(exc)) from exc
    except ValueError as exc:
        raise Conflict(str(exc)) from exc


def list_models(*, db: Database, kind: str | None = None, kb: str | None = None,
                limit: int = 100, kbs: Collection[str] | None = None) -> list[ModelVersion]:
    """The newest ``limit`` versions, of one ``kind`` and one ``kb`` where given; ``kbs`` (``None``:
    every kb, and versions of no kb) narrows them to those kbs."""
    if kbs is None:
        return list_versions(db, kind=kind, kb=kb, limit=limit)
    query = select(ModelVersion).where(ModelVersion.kb.in_(sorted(kbs)))
    if kind is not None:
        query = query.where(ModelVersion.kind == kind)
    if kb is not None:
        query = query.where(ModelVersion.kb == kb)
    with db.session() as session:
        return list(session.scalars(query.order_by(ModelVersion.created_at.desc()).limit(limit)))


def kb_of(*, db: Database, version: str) -> str | None:
    """The kb a registered version serves (``None`` for one of no kb)."""
    return get(db=db, version=version).kb


def get(*, db: Database, version: str) -> ModelVersion:
    with db.session() as session:
        return found(session.get(ModelVersion, version), f"model version {version!r}")


def activate(*, db: Database, version: str, actor: str) -> ModelVersion:
    """Serve ``version`` for its kind and kb from now on: the API and the check workers pick it up
    within seconds (their registry reads are cached for 5 and 10 s)."""
    with _registry_problems():
        return activate_version(db, version, actor=actor)


def try_version(*, db: Database, version: str, mode: str, share: float = 0.0, actor: str) -> ModelVersion:
    """Put ``version`` on trial: ``shadow`` (answers beside the active version, unseen) or ``ab``
    (answers ``share`` of the kb's questions, sticky per API key); served within seconds."""
    with _registry_problems():
        return start_trial(db, version, mode=mode, share=share, actor=actor)


def stop_trial(*, db: Database, version: str, actor: str) -> ModelVersion:
    """Take ``version`` off its trial; it stays a ``candidate``."""
    with _registry_problems():
        return end_trial(db, version, actor=actor)


def roll_back(*, db: Database, kb: str, kind: str, actor: str, reason: str = "rolled back by hand") -> tuple[str, str]:
    """Serve ``kb``'s last good ``kind`` again (see :func:`factloom.ledger.rollback`)."""
    try:
        return rollback(db, kind=kind, kb=kb, actor=actor, reason=reason)
    except LookupError as exc:
        raise Conflict(str(exc)) from exc


def figures(*, client: redis.Redis, row: ModelVersion) -> dict[str, Figures]:
    """What ``row`` answered, per role (``active``, ``ab``, ``shadow``), from every API process."""
    return read(client, row.kb, row.id) if row.kb is not None else {}


def unlearned(*, db: Database, kb: str, kind: str) -> int:
    """How many facts committed (``scorer``) or answers marked (``reasoner``) ``kb``'s active ``kind``
    has not learned yet."""
    from factloom.learn.continual import new_facts
    from factloom.learn.feedback import new_feedback

    if kind not in UPDATES:
        raise Conflict(f"nothing to learn called {kind!r}; known: {', '.join(UPDATES)}")
    return (new_facts(db, kb) if kind == "scorer" else new_feedback(db, kb))[0]


def request_update(*, db: Database, kb: str, kind: str) -> int:
    """Queue an update of ``kind`` for ``kb`` on the learner, however little is new; returns how
    many new facts (or feedback answers) it will learn. Nothing new: :class:`Conflict`."""
    from factloom.workers.tasks import enqueue_learn

    new = unlearned(db=db, kb=kb, kind=kind)
    if not new:
        what = "facts committed" if kind == "scorer" else "answers marked"
        raise Conflict(f"kb {kb!r} has no {what} since its active {kind} learned: nothing to learn")
    enqueue_learn(kb, kind, force=True)
    return new
