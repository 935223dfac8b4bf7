"""Data-parallel training of the scorer: two gloo processes on CPU learn what one process learns.

End to end, the real ``torchrun`` command trains a kb's scorer from the test Neo4j in 2 processes and
rank 0 registers it in the ledger; the same job in one process is the reference. At the model level,
two processes fit a scorer with the EWC penalty (and a last batch that leaves one rank no rows) and
measure its Fisher, against one process doing the same.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from factloom.model.ewc import ElasticWeights
from factloom.model.scorer import ComplExScorer

# the spawned ranks of the last test import this module: the platform's modules (the ledger, the
# graph driver, the learner tests' Celery app) are imported where the end-to-end tests need them
if TYPE_CHECKING:
    from factloom.config import Settings
    from factloom.graph import Neo4jStore
    from factloom.ledger import Database, ModelVersion

pytestmark = pytest.mark.integration

KB = "ddp-films"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
# small enough for this 2-core machine, big enough for 11 steps an epoch and a Fisher of 2 batches
JOB = ["-m", "factloom.learn.distributed", "--kb", KB, "--rank", "16", "--epochs", "20", "--batch-size", "100"]
# not anchored: the two ranks share torchrun's stdout, and one's line may start right after the other's text
DIGESTS = re.compile(r"rank (\d)/(\d): parameters ([0-9a-f]{64}) fisher ([0-9a-f]{64})")


@pytest.fixture(scope="module")
def ledger(settings: Settings, neo4j_service: Any) -> Iterator[Database]:
    """The migrated test ledger, without the platform's processes (the job needs Neo4j and SQL only)."""
    from factloom.ledger import Database
    from factloom.platform.migrate import migrate

    migrate(settings)
    database = Database(settings.sql_url)
    yield database
    database.dispose()


def run(command: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)  # noqa: S603
    return done, time.perf_counter() - started


def registered(ledger: Database, stdout: str) -> ModelVersion:
    from factloom.ledger import ModelVersion

    (version,) = re.findall(rf"^scorer for kb {KB}: (\S+) \(active\)", stdout, re.M)
    with ledger.session() as session:
        row = session.get(ModelVersion, version)
        assert row is not None
        return row


def test_torchrun_with_two_gloo_processes_learns_what_one_process_learns(
    store: Neo4jStore, ledger: Database, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    from factloom.graph import FactWrite, fact_id_for
    from factloom.learn import distributed
    from factloom.learn.artefacts import ewc_path, probe_path
    from factloom.learn.continual import _known, _sample
    from factloom.ledger import active_version
    from factloom.model.distributed import digest, parameter_digest
    from tests.support.data import films

    store.drop_kb(KB)
    rows = films(0, 300)  # 600 facts, as the learner tests' kbs
    store.write_facts(KB, [FactWrite(fact_id=fact_id_for(KB, s, p, o), subject=s, predicate=p, object=o,
                                     source="catalogue") for s, p, o in rows])

    capsys.readouterr()
    assert distributed.main(JOB[2:]) == 0  # the same job in this one process: no process group
    one = capsys.readouterr().out
    before = set(settings.models_dir.glob(f"scorer-{KB}-*.pt"))
    two, two_s = run([TORCHRUN, "--standalone", "--nproc-per-node", "2", *JOB])
    assert two.returncode == 0, two.stderr[-3000:]

    # both ranks finished and hold the same parameters and the same Fisher
    ranks = {int(r): (world, params, fisher) for r, world, params, fisher in DIGESTS.findall(two.stdout)}
    assert set(ranks) == {0, 1} and {w for w, _, _ in ranks.values()} == {"2"}, two.stdout
    assert ranks[0][1:] == ranks[1][1:]
    (single_rank,) = DIGESTS.findall(one)
    assert single_rank[:2] == ("0", "1")

    # rank 0 alone saved one artefact, with its probe and EWC anchor, and registered it as active
    version = registered(ledger, two.stdout)
    (artefact,) = set(settings.models_dir.glob(f"scorer-{KB}-*.pt")) - before
    assert Path(version.artefact) == artefact and probe_path(artefact).exists()
    assert active_version(ledger, kind="scorer", kb=KB).id == version.id  # type: ignore[union-attr]
    metrics = version.metrics or {}
    assert metrics["processes"] == 2 and metrics["backend"] == "gloo" and metrics["facts"] == 600
    scorer = ComplExScorer.load(artefact)
    assert parameter_digest(scorer.model) == ranks[0][1]  # what every rank held is what was saved
    anchor = ElasticWeights.load(ewc_path(artefact))
    assert digest(anchor.fisher.items()) == ranks[0][2]
    # the all-reduced Fisher is the one one process measures on the same facts
    fisher = scorer.fisher(_sample(_known(scorer), settings.learn_replay, 0))
    for name, value in fisher.items():
        torch.testing.assert_close(anchor.fisher[name], value, atol=1e-5, rtol=1e-4)

    # and the model is the one-process one, to floating-point rounding
    reference = registered(ledger, one)
    assert (reference.metrics or {})["processes"] == 1
    alone = ComplExScorer.load(Path(reference.artefact))
    assert alone.entities == scorer.entities
    for name, value in alone.model.state_dict().items():
        torch.testing.assert_close(scorer.model.state_dict()[name], value, atol=1e-3, rtol=1e-3)
    ref = reference.metrics or {}
    with capsys.disabled():  # the figures docs/learning.md quotes
        print(f"\nfit: 1 process {ref['fit_seconds']} s, 2 processes {metrics['fit_seconds']} s "
              f"(torchrun command {two_s:.1f} s); valid MRR {ref['valid_mrr']} / {metrics['valid_mrr']}, "
              f"accuracy {ref['valid_accuracy']} / {metrics['valid_accuracy']}")
    assert metrics["final_loss"] == pytest.approx(ref["final_loss"], rel=1e-3)
    assert metrics["valid_mrr"] == pytest.approx(ref["valid_mrr"], abs=0.02) and ref["valid_mrr"] > 0.3
    assert metrics["valid_accuracy"] == pytest.approx(ref["valid_accuracy"], abs=0.05)


def test_a_failed_read_stops_every_rank_with_rank_0s_reason(store: Neo4jStore, ledger: Database) -> None:
    done, _ = run([sys.executable, "-m", "factloom.platform.cli", "train", "scorer", "--kb", "no such kb",
                   "--nproc", "2"])  # factloom train scorer --nproc 2: execs torchrun
    assert done.returncode != 0
    # rank 1 never reads the kb: it stops with the reason rank 0 broadcast instead of waiting for facts
    reason = "rank 0 could not read kb 'no such kb': invalid knowledge base name 'no such kb'"
    assert done.stderr.count(reason) == 2, done.stderr[-3000:]


# --- the model level: ComplExScorer.fit / fisher with distributed=True ---

def _cities(people: range, rel: str, shift: int) -> list[tuple[str, str, str]]:
    return [(f"p{i}", rel, f"c{(i + shift) % 4}") for i in people]


def _learn_two_snapshots(distributed: bool) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[float]]:
    """Snapshot A, its Fisher (5 batches), then snapshot B with the EWC penalty: 40 rows in batches
    of 13, so the last batch has one row and rank 1 none."""
    part_a = _cities(range(12), "lives_in", 0)
    part_b = _cities(range(12), "works_in", 1) + _cities(range(12, 20), "lives_in", 0)
    torch.manual_seed(0)
    scorer = ComplExScorer.from_triples(part_a, rank=8)
    scorer.fit(part_a, epochs=15, batch_size=13, lr=0.5, reg=1e-3, progress=False, distributed=distributed)
    fisher = scorer.fisher(part_a, batch_size=5, distributed=distributed)
    ewc = ElasticWeights.from_model(scorer.model, fisher, lam=100.0)
    scorer.extend([x for s, _, o in part_b for x in (s, o)], [p for _, p, _ in part_b])
    losses = scorer.fit(part_b, epochs=15, batch_size=13, lr=0.5, reg=1e-3, progress=False, keep_known=True,
                        ewc=ewc, negatives=3, distributed=distributed)
    return dict(scorer.model.state_dict()), fisher, losses


def _rank(rank: int, rendezvous: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        torch.save(_learn_two_snapshots(True), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_data_parallel_fit_with_ewc_and_fisher_match_one_process(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(str(tmp_path / "rendezvous"), str(tmp_path / "rank")), nprocs=2)
    (params0, fisher0, losses0), (params1, fisher1, losses1) = (
        torch.load(tmp_path / f"rank.{r}", weights_only=True) for r in (0, 1))
    assert all(torch.equal(params0[n], params1[n]) for n in params0) and losses0 == losses1
    assert all(torch.equal(fisher0[n], fisher1[n]) for n in fisher0)
    params, fisher, losses = _learn_two_snapshots(False)
    for name in params:
        torch.testing.assert_close(params0[name], params[name], atol=1e-4, rtol=1e-4)
    for name in fisher:
        torch.testing.assert_close(fisher0[name], fisher[name], atol=1e-5, rtol=1e-4)
    assert losses0 == pytest.approx(losses, rel=1e-4)
