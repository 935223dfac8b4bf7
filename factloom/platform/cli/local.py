"""The local platform's commands: ``up`` (services, migrations, the CLI's own admin key, the demo kb
and its feedback), ``down``, ``status``, ``api`` (the HTTP API in the foreground), ``migrate``,
``backup`` and ``restore``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from factloom.config import DEFAULT_KB, Settings
from factloom.platform.cli.api_calls import api_client

__all__ = ["cmd_up", "cmd_down", "cmd_api", "cmd_status", "cmd_migrate", "cmd_backup", "cmd_restore"]


def _local_admin_key(settings: Settings) -> str:
    """The key the CLI itself uses, created once and kept (mode 0600) in the platform's home."""
    from factloom.ledger import Database
    from factloom.platform.auth.service import create_key

    path = settings.home / "api-key"
    if path.exists():
        return path.read_text().strip()
    db = Database(settings.sql_url)
    try:
        token, _ = create_key(db=db, name="local-cli", scopes=["admin"])
    finally:
        db.dispose()
    path.write_text(token)
    path.chmod(0o600)
    return token


def cmd_up(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform import services
    from factloom.platform.migrate import migrate

    print("starting Neo4j and Redis …", flush=True)
    services.start_infra(settings)
    print("migrating the ledger and the graph schema …", flush=True)
    migrate(settings)
    _local_admin_key(settings)
    print("starting API, workers and beat …", flush=True)
    services.start_app(settings)
    monitoring = ""
    if args.monitoring or settings.monitoring:
        from factloom.platform.monitoring import start_monitoring

        print("starting Prometheus and Alertmanager …", flush=True)
        found = start_monitoring(settings)
        monitoring = "".join(f"  {name:<11}{service.url}\n" for name, service in reversed(found.items()))
    if not args.no_demo:
        demo = Path(args.demo) if args.demo else settings.demo_kb_path
        _load_demo(settings, demo)
        _demo_feedback(settings, demo.parent)
    bolt = settings.neo4j_uri
    print(
        f"\nFactLoom is up.\n  API        {settings.base_url}  (OpenAPI: {settings.base_url}/docs)\n"
        f"  admin UI   {settings.base_url}/admin  (accounts: factloom users create NAME --role reviewer|admin)\n"
        f"  metrics    {settings.base_url}/metrics\n{monitoring}  Neo4j      {bolt}  (user {settings.neo4j_user}, "
        f"password in {settings.home / 'neo4j-password'})\n  Redis      {settings.redis_url}\n"
        f"  SQL        {settings.sql_url}\n  API key    {settings.home / 'api-key'} (scope admin)\n"
        f"  logs       {settings.home / 'logs'}\n\nTry: factloom query \"who directed [Blade Runner]\""
    )


def _load_demo(settings: Settings, path: Path) -> None:
    from sqlalchemy import func, select

    from factloom.graph import Neo4jStore
    from factloom.ledger import Database, FactSubmission
    from factloom.platform.bulk import ingest_file

    db = Database(settings.sql_url)
    try:
        with db.session() as session:
            submitted = session.scalar(
                select(func.count()).select_from(FactSubmission).where(FactSubmission.kb == DEFAULT_KB)
            ) or 0
    finally:
        db.dispose()
    if submitted:
        store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
        try:
            _, facts = store.count(DEFAULT_KB)
        finally:
            store.close()
        print(f"demo knowledge: {submitted} facts already submitted to '{DEFAULT_KB}', {facts} in the graph")
        return
    if not path.exists():
        print(f"demo knowledge: {path} not found, skipped (pass --demo PATH)")
        return
    print(f"demo knowledge: loading {path} through the ingest API …", flush=True)
    with api_client(settings) as client:
        result = ingest_file(client, str(path), kb=DEFAULT_KB, source="metaqa-wikimovies")
    print(f"demo knowledge: {result.submitted} submitted, verdicts {result.counts}")


def _demo_feedback(settings: Settings, data_dir: Path) -> None:
    """MetaQA's training questions (beside the demo KB) as answers marked right, once: the learner
    trains the demo kb's router and reasoner from them, as it would from people's feedback."""
    from factloom.learn.qa import load_questions
    from factloom.platform.bulk import post_feedback

    sets = [n for n in ("1hop", "2hop", "3hop") if (data_dir / f"qa_{n}_dev.txt").exists()]
    if not sets or settings.demo_feedback_questions <= 0:
        return
    with api_client(settings) as client:
        if client.feedback_list(kb=DEFAULT_KB, limit=1)["items"]:
            print(f"demo feedback: '{DEFAULT_KB}' has answer feedback already")
            return
        items = []
        for name in sets:
            questions = load_questions("metaqa", data_dir, name, "train")[:settings.demo_feedback_questions]
            items += [{"question": qa.question, "answer": answer, "correct": True}
                      for qa in questions for answer in qa.answers]
        print(f"demo feedback: {len(items)} right answers to MetaQA training questions "
              f"({settings.demo_feedback_questions} per set of {', '.join(sets)}) …", flush=True)
        post_feedback(client, items, kb=DEFAULT_KB)
    print("demo feedback: the learner trains the demo kb's router and reasoner from it within minutes "
          "('factloom status' shows them active)")


def cmd_down(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform import services

    services.stop_all(settings)
    print("FactLoom stopped.")


def cmd_api(args: argparse.Namespace, settings: Settings) -> None:
    """Serve the HTTP API in the foreground (what ``up`` and docker-compose run): uvicorn with
    ``--workers`` processes, which share their metrics through a multiprocess directory
    (``PROMETHEUS_MULTIPROC_DIR`` when set, else one under ``home/run``), emptied first unless
    ``--shared-metrics`` says that processes already running write there too (``up``'s workers)."""
    from factloom.metrics import MULTIPROC_ENV, reset_multiprocess_dir

    host = args.host or settings.api_host
    port = settings.api_port if args.port is None else args.port
    workers = settings.api_workers if args.workers is None else args.workers
    if workers < 1:
        sys.exit(f"--workers (FACTLOOM_API_WORKERS) must be 1 or more, not {workers}")
    shared = Path(os.environ.get(MULTIPROC_ENV) or settings.home / "run" / f"metrics-{port}")
    if args.shared_metrics:
        shared.mkdir(parents=True, exist_ok=True)  # emptying it would lose what the running workers write
    else:
        reset_multiprocess_dir(shared)
    os.environ[MULTIPROC_ENV] = str(shared)
    argv = [sys.executable, "-m", "uvicorn", "factloom.platform.app:app", "--host", host, "--port", str(port),
            "--workers", str(workers)]
    os.execv(sys.executable, argv)  # noqa: S606 - the same pid, so a pid file written for this process stays right


def cmd_status(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform import services

    states = services.status(settings)
    if not states.get("postgres"):
        states.pop("postgres", None)  # only the tests start a local PostgreSQL
    for name, up in states.items():
        print(f"  {name:<9} {'up' if up else 'down'}")
    if not all(states.values()):
        sys.exit(1)
    _print_kbs(settings)


def _print_kbs(settings: Settings) -> None:
    """Each kb's submissions by where they stand, and the models that answer its questions."""
    from factloom.ledger import Database, Status, active_versions
    from factloom.platform.admin.batches import kb_counts

    db = Database(settings.sql_url)
    try:
        counts = kb_counts(db=db)
        active = active_versions(db, ("router", "reasoner", "scorer", "fusion"))
    finally:
        db.dispose()
    if not counts:
        return
    in_flight = (Status.pending, Status.checking, Status.accepted, Status.reviewed)
    print(f"\n  {'kb':<16}{'committed':>10}{'in flight':>10}{'review':>8}{'rejected':>10}  active models")
    for kb, by in sorted(counts.items()):
        models = ", ".join(f"{kind} {active[(kind, kb)][0]}" for kind in ("router", "reasoner", "scorer", "fusion")
                           if (kind, kb) in active) or "none (the baseline reasoner, the rule fusion)"
        print(f"  {kb:<16}{by.get(Status.committed, 0):>10}{sum(by.get(s, 0) for s in in_flight):>10}"
              f"{by.get(Status.needs_review, 0):>8}{by.get(Status.rejected, 0):>10}  {models}")


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform.migrate import migrate

    migrate(settings)
    print("ledger and graph schema are current")


def cmd_backup(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform.backup import BackupError, backup

    try:
        manifest = backup(settings, Path(args.dir))
    except BackupError as exc:
        sys.exit(str(exc))
    print(f"backed up {sum(manifest['ledger'].values())} ledger rows and {sum(manifest['graph'].values())} "
          f"graph items into {args.dir}")


def cmd_restore(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.platform import services
    from factloom.platform.backup import BackupError, restore
    from factloom.platform.migrate import migrate

    print("starting Neo4j and Redis, migrating …", flush=True)
    services.start_infra(settings)
    migrate(settings)
    try:
        manifest = restore(settings, Path(args.dir))
    except BackupError as exc:
        sys.exit(str(exc))
    print(f"restored the backup of {manifest['home']} ({manifest['created_at']}) into {settings.home}; "
          "'factloom up --no-demo' starts the rest")
