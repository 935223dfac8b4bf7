"""The ``factloom`` command against the live test platform."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.platform.auth.service import create_key
from tests.support.api import factloom

pytestmark = pytest.mark.integration


def test_keys_ingest_and_query_from_the_command_line(
    live: object, db: Database, store: Neo4jStore, tmp_path: Path, settings: Settings
) -> None:
    made = factloom("keys", "create", "--scopes", "ingest,query", "--name", "cli-test")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("fl_") and "shown once" in made.stderr
    refused = factloom("keys", "create", "--scopes", "ingest,superuser")
    assert refused.returncode != 0 and "unknown scope(s) superuser" in refused.stderr

    jsonl = tmp_path / "facts.jsonl"
    jsonl.write_text("\n".join(json.dumps(f) for f in [
        {"subject": "Heat", "predicate": "directed_by", "object": "Michael Mann"},
        {"subject": "Heat", "predicate": "starred_actors", "object": "Al Pacino", "source": "imdb"},
    ]) + "\n")
    tsv = tmp_path / "facts.tsv"
    tsv.write_text("subject\tpredicate\tobject\tsource\nCollateral\tdirected_by\tMichael Mann\tdvd\n")
    csv = tmp_path / "facts.csv"
    csv.write_text("subject,predicate,object,evidence\nThief,directed_by,Michael Mann,a 1981 crime film by Mann\n")
    for path in (jsonl, tsv, csv):
        done = factloom("ingest", str(path), "--kb", "cli", "--source", "cli-test", key=key)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["counts"]["committed"] == summary["submitted"] > 0
    assert store.count("cli") == (5, 4)

    answered = factloom("query", "what movies did [Michael Mann] direct", "--kb", "cli", key=key)
    assert answered.returncode == 0, answered.stderr
    names = {line.split("  ", 1)[1] for line in answered.stdout.splitlines() if line[:1].isdigit()}
    assert {"Heat", "Collateral", "Thief"} <= names
    # each path is walked from the linked entity: the film is reached against the fact's direction
    assert "Michael Mann ←directed_by– Heat" in answered.stdout
    unlinked = factloom("query", "what movies did [Nobody Here] direct", "--kb", "cli", key=key)
    assert unlinked.returncode == 0 and "no answer found: no entity of the question" in unlinked.stdout
    misspelt = factloom("query", "what movies did [Michael Mann] direct", "--kb", "clii", key=key)
    assert misspelt.returncode != 0 and "knowledge base 'clii' holds no entities" in misspelt.stderr
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        down = factloom("query", "who directed [Heat]", key=key, FACTLOOM_API_PORT=str(closed.getsockname()[1]))
    assert down.returncode != 0 and "cannot reach the API at http://127.0.0.1:" in down.stderr


def test_a_bad_file_submits_nothing(live: object, db: Database, tmp_path: Path) -> None:
    token, _ = create_key(db=db, name="cli-bad", scopes=["ingest"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"subject": "A", "predicate": "p", "object": "B"}) + "\n{not json\n")
    result = factloom("ingest", str(bad), "--kb", "clibad", key=token)
    assert result.returncode != 0 and "bad.jsonl:2: not JSON" in result.stderr
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"subject": "A", "object": "B"}) + "\n")
    result = factloom("ingest", str(missing), "--kb", "clibad", key=token)
    assert result.returncode != 0 and "record 1 lacks predicate" in result.stderr
    page = httpx.get(f"{Settings().base_url}/v1/review", params={"kb": "clibad", "status": "pending"},
                     headers={"Authorization": f"Bearer {create_key(db=db, name='r', scopes=['review'])[0]}"})
    assert page.json()["total"] == 0


def test_models_from_the_command_line(live: object, db: Database, tmp_path: Path) -> None:
    from factloom.ledger import register_version

    kb = "cli-models"
    for name in ("first", "second"):
        (tmp_path / name).write_bytes(b"a scorer")
    first = register_version(db, kind="scorer", kb=kb, artefact=tmp_path / "first", metrics={})
    second = register_version(db, kind="scorer", kb=kb, artefact=tmp_path / "second", metrics={})
    listed = factloom("models", "list", "--kind", "scorer", "--kb", kb)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:4] for line in listed.stdout.splitlines()] == [
        ["active", "scorer", kb, second], ["retired", "scorer", kb, first]]
    rolled = factloom("models", "activate", first)
    assert rolled.returncode == 0 and f"{first} is now the active scorer of kb '{kb}'" in rolled.stdout
    after = factloom("models", "list", "--kb", kb).stdout.splitlines()
    assert {line.split()[3]: line.split()[0] for line in after} == {first: "active", second: "retired"}
    unknown = factloom("models", "activate", "no-such-version")
    assert unknown.returncode != 0 and "no model version 'no-such-version'" in unknown.stderr
    (tmp_path / "second").unlink()
    gone = factloom("models", "activate", second)
    assert gone.returncode != 0 and f"its artefact {tmp_path / 'second'} is gone" in gone.stderr


def test_review_from_the_command_line(live: object, tmp_path: Path) -> None:
    kb = "cli-review"
    key = factloom("keys", "create", "--scopes", "ingest,review", "--name", "cli-reviewer").stdout.strip()
    for name, year in (("known", "1995"), ("claim", "1999")):  # release_year is functional: a contradiction
        rows = f"subject\tpredicate\tobject\tsource\nHeat\trelease_year\t{year}\t{name}\n"
        (tmp_path / f"{name}.tsv").write_text(rows)
        done = factloom("ingest", str(tmp_path / f"{name}.tsv"), "--kb", kb, key=key)
        assert done.returncode == 0, done.stderr
    listed = factloom("review", "list", "--kb", kb, key=key)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "1 waiting for review, the oldest 1:", listed.stdout
    assert "[cli-review] Heat —release_year→ 1999" in lines[1] and "1995" in lines[2]
    submission = lines[1].split()[0]
    decided = factloom("review", "decide", submission, "reject", "--reason", "the poster says 1995", key=key)
    assert decided.returncode == 0 and decided.stdout.strip() == f"{submission}: reject, now rejected"
    assert factloom("review", "list", "--kb", kb, key=key).stdout.strip() == "0 waiting for review"
    rows = [line.split() for line in factloom("status").stdout.splitlines()]
    assert ["kb", "committed", "in", "flight", "review", "rejected", "active", "models"] in rows
    assert [kb, "1", "0", "0", "1", "none", "(the", "baseline", "reasoner,", "the", "rule", "fusion)"] in rows
    again = factloom("review", "decide", "no-such-submission", "accept", key=key)
    assert again.returncode != 0 and "no submission no-such-submission" in again.stderr
