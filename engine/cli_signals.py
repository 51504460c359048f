"""``stepwise signal``: send a signal to an action from the command line (audited, as the
studio's form sends it).

    stepwise signal ID NAME [--payload JSON] [--by NAME] [--reason TEXT]
"""

from __future__ import annotations

import argparse
import json
import sys

from . import commands, db
from .cli_base import DATABASE_URL, argument, command
from .cli_operator import ACTION_ID, BY, IMPORT, REASON, connected, operator, report


@command(
    "signal",
    ACTION_ID,
    argument("name", metavar="NAME", help='the signal\'s name, e.g. "approved"'),
    argument("--payload", metavar="JSON", help="a JSON value the waiting step receives"),
    BY,
    REASON,
    IMPORT,
    DATABASE_URL,
)
def signal(args: argparse.Namespace) -> int:
    """Send signal NAME to an action: a step waiting for it resumes, else it waits in the inbox."""
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except ValueError as error:
        print(f"stepwise: error: --payload is not valid JSON: {error}", file=sys.stderr)
        return 2
    with connected(args) as sa_engine:
        db.configure(sa_engine)
        result = commands.signal(args.action_id, args.name, payload, by=operator(args), note=args.reason)
    return report(result, f"signal {args.name!r} to action {args.action_id}")
