"""Who may use the platform: ``keys`` (API keys: create, list, rotate, revoke) and ``users`` (the
admin UI's accounts), written to the ledger directly."""

from __future__ import annotations

import argparse
import sys

from factloom.config import Settings

__all__ = ["cmd_keys", "cmd_users"]


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
