"""The commands that go through the HTTP API, as any client would: ``ingest``, ``review``, ``query``
and ``feedback``, with the key ``up`` keeps in the platform's home (or ``FACTLOOM_API_KEY``)."""

from __future__ import annotations

import argparse
import json
import sys

from factloom.config import Settings

__all__ = ["api_client", "cmd_ingest", "cmd_review", "cmd_query", "cmd_feedback"]


def _api_key(settings: Settings) -> str:
    if settings.api_key:
        return settings.api_key
    path = settings.home / "api-key"
    if not path.exists():
        sys.exit(f"no API key: run 'factloom up' (it writes {path}) or set FACTLOOM_API_KEY")
    return path.read_text().strip()


def api_client(settings: Settings):  # type: ignore[no-untyped-def]
    """A :class:`factloom.client.Client` of the configured API, with the CLI's key."""
    from factloom.client import Client

    return Client(settings.base_url, _api_key(settings))


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> None:
    from factloom.client import ApiError
    from factloom.platform.bulk import ingest_file

    try:
        with api_client(settings) as client:
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
        with api_client(settings) as client:
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
        with api_client(settings) as client:
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
        with api_client(settings) as client:
            done = client.feedback(args.question, args.answer, correct=args.right, kb=args.kb, expected=args.expected)
    except ApiError as exc:
        sys.exit(f"error: {exc}")
    print(f"feedback {done['ids'][0]}: {args.answer!r} marked {'right' if args.right else 'wrong'}"
          + (f", the right answer {args.expected!r}" if args.expected else ""))
