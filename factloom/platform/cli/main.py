"""The ``factloom`` command: run the local platform, manage keys, ingest, query, benchmark."""

from __future__ import annotations

import argparse
import sys

from factloom.config import DEFAULT_KB, get_settings
from factloom.platform.cli.accounts import cmd_keys, cmd_users
from factloom.platform.cli.api_calls import cmd_feedback, cmd_ingest, cmd_query, cmd_review
from factloom.platform.cli.jobs import cmd_bench, cmd_eval, cmd_train
from factloom.platform.cli.local import (
    cmd_api,
    cmd_backup,
    cmd_down,
    cmd_migrate,
    cmd_restore,
    cmd_status,
    cmd_up,
)
from factloom.platform.cli.models import cmd_learn, cmd_models

__all__ = ["build_parser", "main"]


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
