"""The operator's commands on the command line: the same ``engine.commands`` functions the
studio and the webhook call, each audited with who ran it and why.

    stepwise cancel ID | retry ID [--timeout S] | skip ID | approve ID | reject ID | complete ID STATUS
    stepwise forget CHECKSUM_KEY | bulk {cancel,retry} [filters] | metrics
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from datetime import timedelta
from typing import Any

from . import broker, commands, db, metrics, status
from .cli_base import DATABASE_URL, argument, command, database

BY = argument(
    "--by", metavar="NAME", help="who runs the command (default: $STEPWISE_OPERATOR, else your login)"
)
REASON = argument("--reason", metavar="TEXT", help="why, for the audit")
IMPORT = argument(
    "--import",
    dest="imports",
    action="append",
    default=[],
    metavar="MODULE",
    help="a module defining your actors (repeatable; also $STEPWISE_IMPORTS, comma-separated): "
    "completing an action runs its callbacks here",
)
ACTION_ID = argument("action_id", type=int, metavar="ID", help="the action's id")


def operator(args: argparse.Namespace) -> str:
    return str(args.by or os.environ.get("STEPWISE_OPERATOR") or getpass.getuser())


def report(result: commands.CommandResult, what: str) -> int:
    if result:
        print(f"{what}: {result.reason}")
        return 0
    print(f"stepwise: {what} changed nothing: {result.reason}", file=sys.stderr)
    return 1


def connected(args: argparse.Namespace) -> Any:
    import importlib

    broker.setup()
    extra = [m for m in os.environ.get("STEPWISE_IMPORTS", "").split(",") if m.strip()]
    for module in [*extra, *args.imports]:
        importlib.import_module(module.strip())
    if not (os.environ.get("REDIS_URL") or os.environ.get("RABBITMQ_URL")):
        print(
            "stepwise: note: no REDIS_URL or RABBITMQ_URL: steps this command makes ready reach the "
            "workers through the sweeper",
            file=sys.stderr,
        )
    return database(args, must_exist=True)


@command("cancel", ACTION_ID, BY, REASON, IMPORT, DATABASE_URL)
def cancel(args: argparse.Namespace) -> int:
    """Cancel an action and its pending and performing descendants."""
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.cancel(args.action_id, by=operator(args), reason=args.reason)
    return report(result, f"cancel action {args.action_id}")


@command(
    "retry",
    ACTION_ID,
    argument("--timeout", type=float, metavar="SECONDS", help="a new timeout for the action"),
    BY,
    REASON,
    IMPORT,
    DATABASE_URL,
)
def retry(args: argparse.Namespace) -> int:
    """Reopen a failed, timed-out or cancelled action where it stopped."""
    timeout = timedelta(seconds=args.timeout) if args.timeout is not None else None
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.retry(args.action_id, by=operator(args), reason=args.reason, timeout=timeout)
    return report(result, f"retry action {args.action_id}")


@command("skip", ACTION_ID, BY, REASON, IMPORT, DATABASE_URL)
def skip(args: argparse.Namespace) -> int:
    """Complete a failed leaf as succeeded (the reason is its note): its parents carry on."""
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.skip(args.action_id, by=operator(args), note=args.reason)
    if result.reason == "not_a_leaf":
        print(
            f"stepwise: skip action {args.action_id} changed nothing: it failed because action "
            f"{result.action_id} below it failed; skip that one instead",
            file=sys.stderr,
        )
        return 1
    return report(result, f"skip action {args.action_id}")


def complete_with(args: argparse.Namespace, to: str, verb: str) -> int:
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.complete(args.action_id, to, by=operator(args), note=args.reason, command=verb)
    return report(result, f"{verb} action {args.action_id}")


@command("approve", ACTION_ID, BY, REASON, IMPORT, DATABASE_URL)
def approve(args: argparse.Namespace) -> int:
    """Complete a waiting outbound action as succeeded."""
    return complete_with(args, status.SUCCEEDED, "approve")


@command("reject", ACTION_ID, BY, REASON, IMPORT, DATABASE_URL)
def reject(args: argparse.Namespace) -> int:
    """Complete a waiting outbound action as failed."""
    return complete_with(args, status.FAILED, "reject")


@command(
    "complete",
    ACTION_ID,
    argument("status", choices=sorted(status.COMPLETIONS), help="the status to complete it with"),
    BY,
    REASON,
    IMPORT,
    DATABASE_URL,
)
def complete(args: argparse.Namespace) -> int:
    """Complete a waiting outbound action with any completion status."""
    return complete_with(args, args.status, "complete")


@command("forget", argument("checksum_key", metavar="CHECKSUM_KEY"), BY, REASON, IMPORT, DATABASE_URL)
def forget(args: argparse.Namespace) -> int:
    """Forget the achievement under CHECKSUM_KEY, so that the next invocation runs."""
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.forget(args.checksum_key, by=operator(args), reason=args.reason)
    return report(result, f"forget {args.checksum_key}")


@command(
    "bulk",
    argument("verb", choices=commands.bulk_module.COMMANDS, help="what to do to every matching action"),
    argument("--status", help="only actions with this status"),
    argument("--name", help="only actions with this name"),
    argument("--actor-type"),
    argument("--actor-id"),
    argument("--concurrency-key"),
    argument("--roots-only", action="store_true"),
    argument("--batch-size", type=int, default=500),
    BY,
    REASON,
    IMPORT,
    DATABASE_URL,
)
def bulk(args: argparse.Namespace) -> int:
    """Cancel or retry every action matching the filters, in batches, audited once."""
    where = commands.ActionFilter(
        status=args.status,
        name=args.name,
        actor_type=args.actor_type,
        actor_id=args.actor_id,
        concurrency_key=args.concurrency_key,
        roots_only=args.roots_only,
    )
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        entry = commands.bulk(
            args.verb,
            where,
            by=operator(args),
            reason=args.reason,
            batch_size=args.batch_size,
            on_progress=lambda e: print(f"{e.done}/{e.total}", flush=True),
        )
    print(f"bulk {args.verb}: {entry.done} of {entry.total} matching actions (audit entry {entry.id})")
    return 0


@command("metrics", DATABASE_URL)
def show_metrics(args: argparse.Namespace) -> int:
    """Print the Prometheus exposition computed from the database."""
    with database(args, must_exist=True) as sa_engine:
        db.configure(sa_engine)
        with db.session() as session:
            sys.stdout.write(metrics.render(session))
    return 0
