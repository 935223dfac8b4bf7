"""``factloom eval reasoner``: hits@1 of a registered reasoner (the kb's active one, or any version
by id, say a candidate before it is activated) on questions over the kb in the store, with the kb's
active router retrieving each question's graph as serving does. Nothing is trained or registered."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from factloom.graph.store import Neo4jStore
from factloom.learn.qa import (
    QA,
    active_router,
    hits_at_1,
    kb_for,
    load_jsonl,
    load_questions,
    prepare,
    question_sets,
    require_files,
)
from factloom.ledger import Database, ModelVersion, active_versions
from factloom.model.embedder import Embedder
from factloom.model.features import RelationFeatures
from factloom.model.pipeline import load_model
from factloom.model.reasoner import PathReasoner

__all__ = ["evaluate", "main"]


def evaluate(*, store: Neo4jStore, embedder: Embedder, db: Database, kb: str, questions: list[QA],
             version: str | None = None, show: bool = True) -> dict[str, Any]:
    """hits@1 of reasoner ``version`` (default: the kb's active one) on ``questions``; a question whose
    topic does not link counts as a miss."""
    active = active_versions(db, ("router", "reasoner"))
    if version is None:
        found = active.get(("reasoner", kb))
        if found is None:
            raise SystemExit(f"no reasoner is active for kb {kb!r}; train one or name a version with --version")
        version, artefact = found
    else:
        with db.session() as session:
            row = session.get(ModelVersion, version)
            if row is None or row.kind != "reasoner":
                raise SystemExit(f"no reasoner version {version!r} (see 'factloom models list --kind reasoner')")
            artefact = row.artefact
    reasoner = load_model(Path(artefact))
    if not isinstance(reasoner, PathReasoner):
        raise SystemExit(f"{artefact} does not hold a reasoner")
    router = active_router(db, kb)
    features = RelationFeatures(embedder.encode)
    samples = prepare(store, embedder, kb, questions, show=show, desc=f"{kb} eval", router=router, features=features)
    among_linked = hits_at_1(reasoner, samples, features) if samples else 0.0
    return {"kb": kb, "reasoner": version, "router": active.get(("router", kb), (None,))[0],
            "questions": len(questions), "linked": len(samples),
            "hits_at_1": round(among_linked * len(samples) / len(questions), 4) if questions else None}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="factloom eval reasoner", description=__doc__)
    p.add_argument("--dataset", choices=["pathquestion", "metaqa", "jsonl"], required=True)
    p.add_argument("--data-dir", type=Path, help="the dataset folder (../shared/data/<dataset>) or a JSONL file")
    p.add_argument("--set", help="question set: PQ-2H … PQL-3H, or 1hop/2hop/3hop (default: all)")
    p.add_argument("--split", choices=["dev", "test"], default="dev")
    p.add_argument("--kb", help="knowledge base in the store (default: the set's own, e.g. pq-2h, metaqa)")
    p.add_argument("--version", help="a reasoner version (default: the kb's active one)")
    p.add_argument("--seed", type=int, default=0, help="the seed of MetaQA's train/dev split (as in training)")
    args = p.parse_args(argv)
    if args.dataset == "jsonl":
        if not args.data_dir or not args.kb or not args.data_dir.is_file():
            raise SystemExit("--dataset jsonl needs --data-dir FILE.jsonl (an existing file) and --kb NAME")
        try:
            groups = {args.kb: load_jsonl(args.data_dir)}
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
    else:
        data_dir = args.data_dir or Path(__file__).resolve().parents[2].parent / "shared" / "data" / args.dataset
        names = question_sets(args.dataset, [args.set] if args.set else None)
        require_files(args.dataset, data_dir, names, (args.split,))
        groups = {}
        for name in names:
            kb = args.kb or kb_for(args.dataset, name)
            groups.setdefault(kb, []).extend(load_questions(args.dataset, data_dir, name, args.split, seed=args.seed))
    from factloom.config import get_settings

    settings = get_settings()
    store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    db = Database(settings.sql_url)
    try:
        embedder = Embedder(settings.embedder_path or None, device=settings.device)
        for kb, questions in groups.items():
            print(json.dumps(evaluate(store=store, embedder=embedder, db=db, kb=kb, questions=questions,
                                      version=args.version)))
    finally:
        store.close()
        db.dispose()
    return 0
