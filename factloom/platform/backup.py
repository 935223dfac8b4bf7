"""``factloom backup DIR`` and ``factloom restore DIR``: a home's ledger, graph and files, and back.

A backup is a directory::

    manifest.json                 format, version, the home it came from, rows per part
    ledger/<table>.jsonl.gz       every ledger row, as plain JSON values (factloom.ledger.dump)
    graph/<label or type>.jsonl.gz  every node, then every relationship, with its properties
    files/models/, files/evidence/  model artefacts and evidence images, as in the home

It is taken from a running platform: the ledger first, then the graph. A fact committed between the
two is in the graph while its ledger row still says ``accepted``; after a restore the sweeper commits
it again, which finds it there and changes nothing. The backup is written under ``DIR.partial`` and
renamed when whole, so a directory named ``DIR`` is always a complete backup.

Restore goes into an empty home (no ledger rows, no nodes, no model files), migrated to this
version's schema: the ledger in one transaction, the graph in batches, the files copied, model
artefact paths moved to the new home. If anything fails the graph and files it wrote are removed, so
the home is empty again and the restore can be run once more.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import neo4j.time
from sqlalchemy import Table
from tqdm import tqdm

from factloom import __version__
from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.ledger.dump import TABLES, dump_table, restore_tables, row_counts

__all__ = ["FORMAT", "GRAPH_PARTS", "BackupError", "backup", "restore"]

FORMAT = 1
GRAPH_NODES = ("Entity", "Alias")
GRAPH_RELATIONSHIPS = ("FACT", "ALIAS_OF")
GRAPH_PARTS = GRAPH_NODES + GRAPH_RELATIONSHIPS  # nodes before the relationships between them
_BATCH = 1000
_DATETIME = "$datetime"


class BackupError(RuntimeError):
    """A backup that cannot be taken or restored, with the reason a person can act on."""


def _encode(value: Any) -> Any:
    if isinstance(value, neo4j.time.DateTime):
        return {_DATETIME: value.iso_format()}
    raise TypeError(f"a graph property of type {type(value).__name__} has no backup form")


def _decode(value: dict[str, Any]) -> Any:
    return neo4j.time.DateTime.from_iso_format(value[_DATETIME]) if set(value) == {_DATETIME} else value


def _write_lines(path: Path, rows: Iterator[dict[str, Any]], bar: tqdm) -> int:
    n = 0
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=_encode, ensure_ascii=False) + "\n")
            n += 1
            bar.update()
    return n


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line, object_hook=_decode)


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _file_parts(settings: Settings) -> dict[str, Path]:
    return {"models": settings.models_dir, "evidence": settings.evidence_dir}


def backup(settings: Settings, out: Path, *, show: bool = True) -> dict[str, Any]:
    """Write a backup of ``settings.home``'s platform (running) into the new directory ``out``;
    its manifest."""
    if out.exists():
        raise BackupError(f"{out} exists already: a backup goes into a new directory")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by a backup that was cut short
    (partial / "ledger").mkdir(parents=True)
    (partial / "graph").mkdir()
    manifest: dict[str, Any] = {
        "format": FORMAT, "factloom": __version__, "created_at": datetime.now(timezone.utc).isoformat(),
        "home": str(settings.home), "models_dir": str(settings.models_dir), "ledger": {}, "graph": {},
    }
    with ExitStack() as stack:
        db = Database(settings.sql_url)
        stack.callback(db.dispose)
        store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
        stack.callback(store.close)
        with tqdm(desc="ledger", unit="row", disable=not show) as bar:
            for table in TABLES:
                manifest["ledger"][table.name] = _write_lines(
                    partial / "ledger" / f"{table.name}.jsonl.gz", dump_table(db, table), bar)
        with tqdm(desc="graph", unit="item", disable=not show) as bar:
            for part in GRAPH_PARTS:
                manifest["graph"][part] = _write_lines(partial / "graph" / f"{part}.jsonl.gz", store.dump(part), bar)
    for name, source in _file_parts(settings).items():
        if source.exists():
            shutil.copytree(source, partial / "files" / name)
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    partial.rename(out)
    return manifest


def _manifest(source: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((source / "manifest.json").read_text())
    except FileNotFoundError:
        raise BackupError(f"{source} is not a backup (no manifest.json; a '.partial' one was cut short)") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source} has backup format {manifest.get('format')}; this version reads {FORMAT}")
    return manifest


def _check_empty(settings: Settings, db: Database, store: Neo4jStore) -> None:
    held = {name: n for name, n in row_counts(db).items() if n}
    if held:
        raise BackupError(f"the ledger at {settings.sql_url} holds rows ({held}); restore into an empty home")
    if not store.is_empty():
        raise BackupError(f"Neo4j at {settings.neo4j_uri} holds nodes; restore into an empty home")
    for path in _file_parts(settings).values():
        if path.exists() and any(path.iterdir()):
            raise BackupError(f"{path} is not empty; restore into an empty home")


def _restore_graph(store: Neo4jStore, source: Path, manifest: dict[str, Any], show: bool) -> dict[str, int]:
    moved: dict[str, str] = {}  # the nodes' element ids in the backup → in this graph
    written = dict.fromkeys(GRAPH_PARTS, 0)
    with tqdm(total=sum(manifest["graph"].values()), desc="graph", unit="item", disable=not show) as bar:
        for label in GRAPH_NODES:
            for batch in _batches(_read_lines(source / "graph" / f"{label}.jsonl.gz")):
                created = store.restore_nodes(label, batch)
                moved.update(created)
                written[label] += len(created)
                bar.update(len(batch))
        for rel_type in GRAPH_RELATIONSHIPS:
            for batch in _batches(_read_lines(source / "graph" / f"{rel_type}.jsonl.gz")):
                written[rel_type] += store.restore_relationships(
                    rel_type, [{**r, "a": moved[r["a"]], "b": moved[r["b"]]} for r in batch])
                bar.update(len(batch))
    return written


def _wipe(settings: Settings, store: Neo4jStore) -> None:
    store.wipe()
    for path in _file_parts(settings).values():
        shutil.rmtree(path, ignore_errors=True)


def restore(settings: Settings, source: Path, *, show: bool = True) -> dict[str, Any]:
    """Restore the backup ``source`` into ``settings.home`` (empty, migrated, Neo4j running);
    the manifest."""
    manifest = _manifest(source)
    old_models, new_models = manifest["models_dir"], str(settings.models_dir)

    def rows_of(table: Table) -> Iterator[dict[str, Any]]:
        for row in _read_lines(source / "ledger" / f"{table.name}.jsonl.gz"):
            if table.name == "model_version" and row["artefact"].startswith(old_models):
                row["artefact"] = new_models + row["artefact"][len(old_models):]
            yield row

    with ExitStack() as stack:
        db = Database(settings.sql_url)
        stack.callback(db.dispose)
        store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
        stack.callback(store.close)
        _check_empty(settings, db, store)
        try:
            for name, target in _file_parts(settings).items():
                if (source / "files" / name).exists():
                    shutil.copytree(source / "files" / name, target, dirs_exist_ok=True)
            graph = _restore_graph(store, source, manifest, show)
            if graph != manifest["graph"]:
                raise BackupError(f"the graph restored {graph} where the backup holds {manifest['graph']}")
            with tqdm(total=sum(manifest["ledger"].values()), desc="ledger", unit="row", disable=not show) as bar:
                try:
                    restore_tables(db, rows_of, manifest["ledger"], on_rows=lambda _table, n: bar.update(n))
                except ValueError as exc:
                    raise BackupError(f"{source} is damaged: {exc}") from exc
        except BaseException:
            _wipe(settings, store)
            raise
    return manifest

