"""``factloom backup`` of the running test platform, restored into a fresh home with a Neo4j of its own:
the same facts, entities and ledger rows, model artefacts moved to the new home; a second restore
into the now full home is refused and writes nothing; a damaged backup's restore undoes itself."""

from __future__ import annotations

import gzip
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database, ModelVersion
from factloom.ledger.dump import row_counts
from factloom.ledger.registry import register_version
from factloom.platform.backup import BackupError, backup, restore
from factloom.platform.migrate import migrate_graph, migrate_sql
from factloom.platform.services import Neo4jService
from tests.services import PORTS, running

pytestmark = pytest.mark.integration

KB = "backup"
N = 120


@pytest.fixture(scope="module")
def fresh(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings of an empty home beside the test platform's: its own Neo4j and SQLite ledger."""
    home = tmp_path_factory.mktemp("restored-home")
    home.chmod(0o755)
    other = settings.model_copy(update={
        "home": home, "neo4j_uri": f"bolt://127.0.0.1:{PORTS['neo4j'] + 50}",
        "neo4j_http_port": PORTS["neo4j_http"] + 50,
    })
    with running(Neo4jService(other)):
        migrate_sql(other.sql_url)
        migrate_graph(other)
        yield other


def facts_of(store: Neo4jStore) -> set[tuple[str, str, str, str | None]]:
    pairs = {(f"Album {i}", "recorded_by") for i in range(N)}
    return {(f.subject, f.predicate, f.object, f.valid_from.isoformat() if f.valid_from else None)
            for facts in store.current_facts(KB, pairs).values() for f in facts}


def test_a_backup_restores_into_a_fresh_home(
    api: httpx.Client, db: Database, store: Neo4jStore, settings: Settings, fresh: Settings, tmp_path: Path
) -> None:
    rows = [{"subject": f"Album {i}", "predicate": "recorded_by", "object": f"Artist {i % 12}",
             "source": "backup-test", **({"valid_from": "1999-05-01T00:00:00Z"} if i % 2 else {})}
            for i in range(N)]
    assert api.post("/v1/facts", json={"kb": KB, "facts": rows}).status_code == 202
    deadline = time.monotonic() + 120
    while store.count(KB)[1] < N:
        assert time.monotonic() < deadline, "the facts were not committed"
        time.sleep(0.5)
    artefact = settings.models_dir / "backup-test" / "scorer.pt"
    artefact.parent.mkdir(parents=True, exist_ok=True)
    artefact.write_bytes(b"weights")
    version = register_version(db, kind="scorer", kb=KB, artefact=artefact, metrics={"mrr": 0.5}, activate=False)

    manifest = backup(settings, tmp_path / "b", show=False)
    assert not (tmp_path / "b.partial").exists()
    assert manifest["graph"]["FACT"] >= N and manifest["ledger"]["fact_submission"] >= N

    # a damaged backup (a ledger row missing) fails after the graph and files were written: all undone
    shutil.copytree(tmp_path / "b", tmp_path / "damaged")
    rows_file = tmp_path / "damaged" / "ledger" / "fact_submission.jsonl.gz"
    lines = gzip.decompress(rows_file.read_bytes()).splitlines(keepends=True)
    rows_file.write_bytes(gzip.compress(b"".join(lines[:-1])))
    with pytest.raises(BackupError, match="damaged.*fact_submission"):
        restore(fresh, tmp_path / "damaged", show=False)
    empty = Neo4jStore(fresh.neo4j_uri, fresh.neo4j_auth())
    try:
        assert empty.is_empty() and not fresh.models_dir.exists()
    finally:
        empty.close()

    restore(fresh, tmp_path / "b", show=False)
    copy = Neo4jStore(fresh.neo4j_uri, fresh.neo4j_auth())
    restored = Database(fresh.sql_url)
    try:
        assert facts_of(copy) == facts_of(store) and len(facts_of(copy)) == N
        assert copy.count(KB) == store.count(KB)
        assert copy.resolve(KB, ["album 7", "Artist 3"]) == store.resolve(KB, ["album 7", "Artist 3"])
        assert row_counts(restored) == manifest["ledger"]
        with restored.session() as session:
            moved = session.get(ModelVersion, version)
            assert moved is not None and moved.kb == KB
            assert Path(moved.artefact) == fresh.models_dir / "backup-test" / "scorer.pt"
            assert Path(moved.artefact).read_bytes() == b"weights"

        before = (row_counts(restored), copy.count(KB))
        with pytest.raises(BackupError, match="empty home"):
            restore(fresh, tmp_path / "b", show=False)
        assert (row_counts(restored), copy.count(KB)) == before
    finally:
        copy.close()
        restored.dispose()
