"""Registered model versions: ``models`` (list, activate, shadow and A/B trials, figures, roll back)
and ``learn`` (ask the learner for an update now, and optionally wait for its gates)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from factloom.config import Settings

__all__ = ["cmd_models", "cmd_learn"]


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
