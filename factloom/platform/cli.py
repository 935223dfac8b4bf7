"""The ``factloom`` command: run the local platform, manage keys, ingest, query, benchmark."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from factloom.config import DEFAULT_KB, Settings, get_settings

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[2]


def _api_key(settings: Settings) -> str:
    if settings.api_key:
        return settings.api_key
    path = settings.home / "api-key"
    if not path.exists():
        sys.exit(f"no API key: run 'factloom up' (it writes {path}) or set FACTLOOM_API_KEY")
    return path.read_text().strip()


def _client(settings: Settings):  # type: ignore[no-untyped-def]
    from factloom.client import Client

    return Client(settings.base_url, _api_key(settings))


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
    with _client(settings) as client:
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
    with _client(settings) as client:
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


def cmd_keys(args: argparse.Namespace, settings: Settings) -> None:
    import getpass

    from factloom.ledger import Database
    from factloom.platform.auth import service
    from factloom.platform.errors import PlatformError

    db = Database(settings.sql_url)
    actor = f"cli:{getpass.getuser()}"
    try:
        if args.keys_command == "create":
            token, principal = service.create_key(
                db=db, name=args.name, scopes=service.parse_scopes(args.scopes), kbs=service.parse_kbs(args.kbs),
                expires_at=service.expiry(days=args.expires_days), actor=actor)
            info = service.get_key(db=db, key_id=principal.key_id)
        elif args.keys_command == "rotate":
            token, info = service.rotate_key(db=db, key_id=args.key_id, actor=actor,
                                             expires_at=service.expiry(days=args.expires_days))
        elif args.keys_command == "revoke":
            info = service.revoke_key(db=db, key_id=args.key_id, actor=actor)
            print(f"key {info.id} ({info.name}) revoked; the API refuses it within {service.KEY_TTL_S:g} s")
            return
        else:
            keys = service.list_keys(db=db, include_revoked=args.all)
            print("\n".join(service.describe(k) for k in keys) if keys else "no API keys")
            return
    except PlatformError as exc:
        sys.exit(f"error: {exc.detail}")
    finally:
        db.dispose()
    print(token)
    print(f"({service.describe(info)}; shown once)", file=sys.stderr)


def cmd_models(args: argparse.Namespace, settings: Settings) -> None:
    import getpass

    from factloom.ledger import Database
    from factloom.platform.errors import PlatformError
    from factloom.platform.models import service

    db = Database(settings.sql_url)
    actor = f"cli:{getpass.getuser()}"
    command = args.models_command
    try:
        if command in ("activate", "promote"):
            row = service.activate(db=db, version=args.version, actor=actor)
            print(f"{row.id} is now the active {row.kind} of kb {row.kb!r}; "
                  f"the API and the workers serve it within 10 s")
            return
        if command in ("shadow", "ab"):
            row = service.try_version(db=db, version=args.version, mode=command,
                                      share=getattr(args, "share", 0.0), actor=actor)
            what = "answers beside the active version, unseen" if command == "shadow" else \
                f"answers {row.traffic_share:.0%} of the kb's questions (by API key)"
            print(f"{row.id} {what}; follow it with 'factloom models figures {row.id}'")
            return
        if command == "stop":
            row = service.stop_trial(db=db, version=args.version, actor=actor)
            print(f"{row.id} is off its trial (a candidate again)")
            return
        if command == "rollback":
            off, on = service.roll_back(db=db, kb=args.kb, kind=args.kind, actor=actor)
            print(f"kb {args.kb!r}: {off} rolled back; {on} serves again within 10 s")
            return
        if command == "figures":
            import redis

            row = service.get(db=db, version=args.version)
            roles = service.figures(client=redis.Redis.from_url(settings.redis_url), row=row)
            print(f"{row.id} ({row.status})")
            for role, f in roles.items():
                p95 = f"{f.p95_ms:.0f} ms" if f.p95_ms is not None else "-"
                agreement = f", agreement {f.agreement:.1%} of {f.compared}" if f.agreement is not None else ""
                print(f"  {role:<7} {f.questions:>8} questions, {f.errors} failed, p95 ≤ {p95}{agreement}")
            return
        rows = service.list_models(db=db, kind=args.kind, kb=args.kb, limit=args.limit)
    except PlatformError as exc:
        sys.exit(f"error: {exc.detail}")
    finally:
        db.dispose()
    if not rows:
        print("no model versions registered" + (" that match" if args.kind or args.kb else
                                                "; train one with 'factloom train NAME'"))
    for row in rows:
        shown = f"ab {row.traffic_share:.0%}" if row.status == "ab" else row.status
        print(f"{shown:<11} {row.kind:<9} {str(row.kb):<14} {row.id:<48} "
              f"{row.created_at:%Y-%m-%d %H:%M}  {_gates_line(row)}")


def _gates_line(row: Any) -> str:
    """``from PARENT, gates passed: retention 0.41 ≥ 0.39, new_knowledge 0.33 > 0.12`` (empty for a
    version trained by hand)."""
    gates = dict(row.gates or {})
    if "passed" not in gates:
        progress = (row.metrics or {}).get("progress")
        return f"from {row.parent}, learning: {progress}" if row.parent and progress else ""
    shown = [f"{name} {g['value']:.3f} {'≥' if name == 'retention' else '>'} {g['threshold']:.3f}"
             for name, g in gates.items() if isinstance(g, dict)]
    return f"from {row.parent}, gates {'passed' if gates['passed'] else 'FAILED'}: {', '.join(shown)}"


def cmd_learn(args: argparse.Namespace, settings: Settings) -> None:
    import time

    from factloom.ledger import Database, list_versions
    from factloom.platform.errors import PlatformError
    from factloom.platform.models import service

    db = Database(settings.sql_url)
    try:
        before = {v.id for v in list_versions(db, kind=args.kind, kb=args.kb, limit=500)}
        try:
            new = service.request_update(db=db, kb=args.kb, kind=args.kind)
        except PlatformError as exc:
            sys.exit(f"error: {exc.detail}")
        what = "committed facts" if args.kind == "scorer" else "marked answers"
        print(f"queued: the learner updates kb {args.kb!r}'s {args.kind} from {new} new {what}")
        if not args.wait:
            print(f"follow it with 'factloom models list --kb {args.kb} --kind {args.kind}'")
            return
        deadline = time.monotonic() + args.timeout
        while not (found := [v for v in list_versions(db, kind=args.kind, kb=args.kb, limit=20)
                             if v.id not in before]):
            if time.monotonic() > deadline:
                sys.exit(f"no new {args.kind} after {args.timeout:.0f} s; see the learner's log in "
                         f"{settings.home / 'logs'}")
            time.sleep(2)
        row = found[0]
        print(f"{row.id}: {row.status}  {_gates_line(row)}")
    finally:
        db.dispose()


def cmd_users(args: argparse.Namespace, settings: Settings) -> None:
    import getpass

    from factloom.ledger import Database
    from factloom.platform.admin.users import create_user, set_password
    from factloom.platform.errors import PlatformError

    db = Database(settings.sql_url)
    actor = f"cli:{getpass.getuser()}"
    try:
        if args.users_command == "create":
            user_id = create_user(db=db, name=args.name, role=args.role, password=args.password, actor=actor)
            print(f"user {args.name} ({args.role}) created: {user_id}")
        else:
            set_password(db=db, name=args.name, password=args.password, actor=actor)
            print(f"user {args.name}: new password set; every sign-in of the account has ended")
    except PlatformError as exc:
        sys.exit(f"error: {exc.detail}")
    finally:
        db.dispose()


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.client import ApiError
    from factloom.platform.bulk import ingest_file

    try:
        with _client(settings) as client:
            result = ingest_file(
                client, args.file, kb=args.kb, source=args.source, batch_size=args.batch_size, wait=not args.no_wait
            )
    except (ValueError, OSError, ApiError) as exc:
        sys.exit(f"error: {exc}")
    print(json.dumps({"submitted": result.submitted, "duplicates": result.duplicates,
                      "batches": len(result.batches), "counts": result.counts}))


def cmd_review(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.client import ApiError

    try:
        with _client(settings) as client:
            if args.review_command == "decide":
                done = client.decide(args.id, args.decision, args.reason)
                print(f"{done['id']}: {done['decision']}, now {done['status']}")
                return
            filters = {"kb": args.kb, "predicate": args.predicate, "source": args.source}
            page = client.review(limit=args.limit, **{k: v for k, v in filters.items() if v})
    except ApiError as exc:
        sys.exit(f"error: {exc}")
    if args.json:
        print(json.dumps(page, indent=2))
        return
    print(f"{page['total']} waiting for review" + (f", the oldest {len(page['items'])}:" if page["items"] else ""))
    for item in page["items"]:
        chance = f"p {item['probability']:.2f}" if item["probability"] is not None else "p —"
        print(f"{item['id']}  [{item['kb']}] {item['subject']} —{item['predicate']}→ {item['object']}  {chance}")
        if item["verdict_reason"]:
            print(f"    {item['verdict_reason']}")


def cmd_query(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.client import ApiError

    try:
        with _client(settings) as client:
            answer = client.query(args.question, kb=args.kb, top_k=args.top_k)
    except ApiError as exc:
        sys.exit(f"error: {exc}")
    if args.json:
        print(json.dumps(answer, indent=2))
        return
    if not answer["answers"]:
        print(f"no answer found: {answer['note']}" if answer.get("note") else "no answer found")
    from factloom.platform.query.paths import path_text, walk
    from factloom.platform.query.schemas import PathStepOut

    seeds = [s["name"] for s in answer.get("seeds", [])]
    for item in answer["answers"]:
        print(f"{item['score']:.3f}  {item['name']}")
        for path in item["paths"][:1]:  # walked from the linked entity, as the admin Ask page writes it
            print("       " + path_text(walk([PathStepOut.model_validate(s) for s in path], seeds)))
    print(f"({', '.join(f'{k} {v:.0f} ms' for k, v in answer['timings_ms'].items())})")


def cmd_feedback(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.client import ApiError

    if args.expected and args.right:
        sys.exit("error: --expected names the right answer to a wrong one; use it with --wrong")
    try:
        with _client(settings) as client:
            done = client.feedback(args.question, args.answer, correct=args.right, kb=args.kb, expected=args.expected)
    except ApiError as exc:
        sys.exit(f"error: {exc}")
    print(f"feedback {done['ids'][0]}: {args.answer!r} marked {'right' if args.right else 'wrong'}"
          + (f", the right answer {args.expected!r}" if args.expected else ""))


def cmd_bench(args: argparse.Namespace, settings: Settings) -> None:
    script = REPO / "bench" / f"{args.name}.py"
    if not script.exists():
        known = sorted(p.stem for p in (REPO / "bench").glob("*.py") if not p.stem.startswith("_"))
        sys.exit(f"no benchmark {args.name!r}; known: {', '.join(known)}")
    sys.argv = [str(script), *args.rest]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


def cmd_eval(args: argparse.Namespace, settings: Settings) -> None:
    if args.name != "reasoner":
        sys.exit(f"nothing to evaluate called {args.name!r}; known: reasoner")
    from factloom.learn.evaluate import main as evaluate

    sys.exit(evaluate(args.rest))


def cmd_train(args: argparse.Namespace, settings: Settings) -> None:
    from factloom import learn

    sys.exit(learn.run(args.name, args.rest))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factloom", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start Neo4j, Redis, API, workers and beat; migrate; load the demo KB")
    up.add_argument("--no-demo", action="store_true", help="do not load the demo knowledge base")
    up.add_argument("--demo", help="the demo KB file (subject|predicate|object lines)")
    up.add_argument("--monitoring", action="store_true",
                    help="also Prometheus and Alertmanager (FACTLOOM_MONITORING=true does the same)")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop every local service").set_defaults(func=cmd_down)
    sub.add_parser("status", help="each service, up or down").set_defaults(func=cmd_status)
    api = sub.add_parser("api", help="serve the HTTP API in the foreground (uvicorn, FACTLOOM_API_WORKERS processes)")
    api.add_argument("--host", help="default FACTLOOM_API_HOST")
    api.add_argument("--port", type=int, help="default FACTLOOM_API_PORT")
    api.add_argument("--workers", type=int, help="processes, default FACTLOOM_API_WORKERS")
    api.add_argument("--shared-metrics", action="store_true",
                     help="keep the metrics directory's files: running workers write there too (as under `up`)")
    api.set_defaults(func=cmd_api)
    sub.add_parser("migrate", help="bring the ledger and the graph schema up to date").set_defaults(func=cmd_migrate)
    backup = sub.add_parser("backup", help="write the ledger, the graph and the model and evidence files to a new "
                            "directory (the platform running)")
    backup.add_argument("dir")
    backup.set_defaults(func=cmd_backup)
    restore = sub.add_parser("restore", help="restore a backup into this empty home (FACTLOOM_HOME)")
    restore.add_argument("dir")
    restore.set_defaults(func=cmd_restore)
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="print a new API key")
    create.add_argument("--scopes", required=True, help="comma separated: ingest,query,review,admin,alerts")
    create.add_argument("--name", default="cli", help="who the key is for")
    create.add_argument("--kbs", help="comma separated: the only kbs the key may read and write (default: all)")
    create.add_argument("--expires-days", type=float, metavar="N", help="the key stops working N days from now")
    create.set_defaults(func=cmd_keys)
    klist = keys.add_parser("list", help="every key: id, prefix, name, scopes, kbs, expiry (never the secret)")
    klist.add_argument("--all", action="store_true", help="revoked keys too")
    klist.set_defaults(func=cmd_keys)
    krevoke = keys.add_parser("revoke", help="refuse a key from now on")
    krevoke.add_argument("key_id", help="the key's id (from 'keys list')")
    krevoke.set_defaults(func=cmd_keys)
    krotate = keys.add_parser("rotate", help="print a new secret for a key (same name, scopes, kbs); revoke the old")
    krotate.add_argument("key_id", help="the key's id (from 'keys list')")
    krotate.add_argument("--expires-days", type=float, metavar="N", help="a new expiry (default: the old key's)")
    krotate.set_defaults(func=cmd_keys)
    users = sub.add_parser("users", help="admin-UI accounts").add_subparsers(dest="users_command", required=True)
    ucreate = users.add_parser("create", help="create an account that signs in to /admin")
    ucreate.add_argument("name")
    ucreate.add_argument("--role", choices=["reviewer", "admin"], required=True)
    ucreate.add_argument("--password", required=True)
    ucreate.set_defaults(func=cmd_users)
    upassword = users.add_parser("password", help="set an account's password; its sign-ins end")
    upassword.add_argument("name")
    upassword.add_argument("--password", required=True)
    upassword.set_defaults(func=cmd_users)
    models = sub.add_parser("models", help="registered model versions: activate, try (shadow, A/B), roll back")
    mcommands = models.add_subparsers(dest="models_command", required=True)
    mlist = mcommands.add_parser("list", help="the newest versions: status, kind, kb, version, created")
    mlist.add_argument("--kind", choices=["router", "reasoner", "scorer", "fusion"])
    mlist.add_argument("--kb")
    mlist.add_argument("--limit", type=int, default=50)
    mlist.set_defaults(func=cmd_models)
    mactivate = mcommands.add_parser("activate", help="serve this version for its kind and kb from now on")
    mactivate.add_argument("version")
    mactivate.set_defaults(func=cmd_models)
    for name, help_ in (("promote", "end a trial: serve this version for all of its kb's questions"),
                        ("shadow", "let this version answer beside the active one, unseen (its figures recorded)"),
                        ("stop", "take this version off its shadow or A/B trial"),
                        ("figures", "what this version answered, per role: questions, failures, p95, agreement")):
        mversion = mcommands.add_parser(name, help=help_)
        mversion.add_argument("version")
        mversion.set_defaults(func=cmd_models)
    mab = mcommands.add_parser("ab", help="send a share of the kb's questions (sticky per API key) to this version")
    mab.add_argument("version")
    mab.add_argument("--share", type=float, default=0.1, help="between 0 and 1 (default 0.1)")
    mab.set_defaults(func=cmd_models)
    mrollback = mcommands.add_parser("rollback", help="serve the kb's last good version of a kind again")
    mrollback.add_argument("--kb", default=DEFAULT_KB)
    mrollback.add_argument("--kind", choices=["router", "reasoner", "scorer", "fusion"], default="reasoner")
    mrollback.set_defaults(func=cmd_models)
    learn = sub.add_parser("learn", help="update a kb's scorer (new facts) or reasoner (feedback) now, on the learner")
    learn.add_argument("--kb", default=DEFAULT_KB)
    learn.add_argument("--kind", choices=["scorer", "reasoner"], default="scorer")
    learn.add_argument("--wait", action="store_true", help="wait for the candidate and print its gates")
    learn.add_argument("--timeout", type=float, default=3600.0, help="how long --wait waits, in seconds")
    learn.set_defaults(func=cmd_learn)
    ingest = sub.add_parser("ingest", help="submit facts from a JSONL, CSV or TSV file")
    ingest.add_argument("file")
    ingest.add_argument("--kb", default=DEFAULT_KB)
    ingest.add_argument("--source", help="source for records that name none")
    ingest.add_argument("--batch-size", type=int, default=1000)
    ingest.add_argument("--no-wait", action="store_true", help="return once submitted, before the checks")
    ingest.set_defaults(func=cmd_ingest)
    review = sub.add_parser("review", help="the facts the checks could not decide; decide one")
    rcommands = review.add_subparsers(dest="review_command", required=True)
    rlist = rcommands.add_parser("list", help="submissions waiting for review, with the checks' reason")
    rlist.add_argument("--kb")
    rlist.add_argument("--predicate")
    rlist.add_argument("--source")
    rlist.add_argument("--limit", type=int, default=20)
    rlist.add_argument("--json", action="store_true", help="the API's page as JSON")
    rlist.set_defaults(func=cmd_review)
    rdecide = rcommands.add_parser("decide", help="accept, keep both values, or reject one submission")
    rdecide.add_argument("id", help="the submission id (from 'review list')")
    # the values of factloom.ledger.tables.Decision, written out: importing the ledger costs every command ~0.25 s
    rdecide.add_argument("decision", choices=["accept", "keep_both", "reject"])
    rdecide.add_argument("--reason", default="", help="why, for the audit trail")
    rdecide.set_defaults(func=cmd_review)
    query = sub.add_parser("query", help="ask a question")
    query.add_argument("question")
    query.add_argument("--kb", default=DEFAULT_KB)
    query.add_argument("--top-k", type=int, default=5)
    query.add_argument("--json", action="store_true")
    query.set_defaults(func=cmd_query)
    feedback = sub.add_parser("feedback", help="mark an answer right or wrong (the models learn from it)")
    feedback.add_argument("question")
    feedback.add_argument("answer", help="the answer's name, as 'query' printed it")
    verdict = feedback.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--right", action="store_true")
    verdict.add_argument("--wrong", action="store_true")
    feedback.add_argument("--expected", metavar="NAME", help="with --wrong: the right answer's name")
    feedback.add_argument("--kb", default=DEFAULT_KB)
    feedback.set_defaults(func=cmd_feedback)
    bench = sub.add_parser("bench", help="run a benchmark from bench/ (ingest, query, kgqa, factcheck, …)")
    bench.add_argument("name")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)
    train = sub.add_parser("train", help="train a model (scorer, fusion, router, reasoner: factloom/learn/) "
                                         "and register its version")
    train.add_argument("name")
    train.add_argument("rest", nargs=argparse.REMAINDER)
    train.set_defaults(func=cmd_train)
    evaluate = sub.add_parser("eval", help="hits@1 of a registered reasoner (active, or --version) on questions")
    evaluate.add_argument("name", help="reasoner")
    evaluate.add_argument("rest", nargs=argparse.REMAINDER)
    evaluate.set_defaults(func=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> None:
    import httpx

    args = build_parser().parse_args(argv)
    settings = get_settings()
    try:
        args.func(args, settings)
    except httpx.TransportError as exc:  # ingest, query: the API is not there
        sys.exit(f"error: cannot reach the API at {settings.base_url} ({exc}); is the platform up? "
                 f"('factloom status', 'factloom up')")


if __name__ == "__main__":
    main()
