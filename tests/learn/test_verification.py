"""Training the scorer and the fusion from the real graph and ledger; the worker picks them up live."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.learn.verification import fusion_examples, train_fusion, train_scorer
from factloom.ledger import Database, ModelVersion
from tests.support.api import checked, checked_with, facts, post, submission_ids, wait_batch

pytestmark = pytest.mark.integration

KB = "chk-train"
GENRES = ["Drama", "Comedy", "Horror", "Western"]


def test_train_scorer_and_fusion_register_versions_the_worker_uses(
    api: httpx.Client, db: Database, store: Neo4jStore, settings: Settings
) -> None:
    films = [(f"Film {i}", "has_genre", GENRES[i % 4]) for i in range(60)]
    films += [(f"Film {i}", "directed_by", f"Director {i % 6}") for i in range(60)]
    wait_batch(api, post(api, KB, facts(films, source="catalogue")))
    # false claims the checks reject, so the ledger holds labels of both kinds
    bad = [{"subject": f"Film {i}", "predicate": "has_genre", "object": "Opera", "source": "spam",
            "valid_from": "2020-01-01T00:00:00Z", "valid_to": "2019-01-01T00:00:00Z"} for i in range(24)]
    wait_batch(api, post(api, KB, bad))

    version, metrics = train_scorer(store, db, kb=KB, models_dir=settings.models_dir, rank=8, epochs=5,
                                    progress=False)
    assert metrics["facts"] == 120 and metrics["relations"] == 2 and 0.0 <= metrics["valid_accuracy"] <= 1.0
    with db.session() as session:
        row = session.get(ModelVersion, version)
        assert row is not None and row.kind == "scorer" and row.status == "active"
        assert row.kb == KB
    item = checked_with(api, db, ("Film 1", "has_genre", "Comedy"), "scorer", "plausibility", version, settings, kb=KB)
    plausibility = next(c for c in item["checks"] if c["verifier"] == "plausibility")
    assert plausibility["probability"] is not None and "graph embedding" in plausibility["explanation"]
    assert item["fusion"]["versions"]["scorer"] == version
    # names are resolved to the stored ones before scoring, so another casing is not "unseen"
    cased = checked(api, submission_ids(db, post(api, KB, facts([("film 5", "has_genre", "COMEDY")], "probe")))[0])
    assert next(c for c in cased["checks"] if c["verifier"] == "plausibility")["probability"] is not None
    unseen = checked(api, submission_ids(db, post(api, KB, facts([("Film 1", "has_genre", "Jazz")], "probe")))[0])
    assert next(c for c in unseen["checks"] if c["verifier"] == "plausibility")["probability"] is None
    # without a learned fusion the scorer alone may ask for review, never reject
    odd = checked(api, submission_ids(db, post(api, KB, facts([("Film 3", "directed_by", "Comedy")], "probe")))[0])
    doubt = next(c for c in odd["checks"] if c["verifier"] == "plausibility")
    assert odd["status"] != "rejected" and doubt["probability"] >= 0.2, doubt
    if "unfloored" in doubt["details"]:
        assert doubt["details"]["unfloored"] < 0.2 and doubt["probability"] == 0.2

    rows, labels, origin = fusion_examples(db, kb=KB)
    assert len(rows) == len(labels) >= 140 and labels.count(0) == 24 and origin["auto"] == len(labels)
    fusion_version, fusion_metrics = train_fusion(db, kb=KB, models_dir=settings.models_dir, target=0.05,
                                                  method="logistic")
    assert fusion_metrics["examples"] == len(labels) and "certificate" in fusion_metrics
    assert fusion_metrics["folds"] == 0  # 24 false labels: too few for 5 cross-fitting folds
    with db.session() as session:
        active = session.scalars(select(ModelVersion).where(ModelVersion.kind == "fusion",
                                                            ModelVersion.status == "active")).all()
        assert [r.id for r in active if r.kb == KB] == [fusion_version]
    item = checked_with(api, db, ("Film 2", "has_genre", "Horror"), "fusion", "fusion", fusion_version, settings, kb=KB)
    fusion = item["fusion"]
    assert fusion["method"] == "LearnedFusion" and fusion["versions"]["fusion"] == fusion_version
    assert fusion["certificate"] is not None and fusion["certificate"]["target"] == 0.05
    assert fusion["accept"] == fusion_metrics["accept"]
