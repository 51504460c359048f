"""Schedules: a cron or interval rule that starts an action on an actor, each tick exactly
once whatever the number of clock processes; missed ticks and overlapping runs follow the
schedule's policies; operators edit, pause, resume, trigger and delete them.

    engine.schedule("nightly-report", cron="0 2 * * *", timezone="Europe/Paris",
                    actor=reports, action="generate", args=["daily"], missed="run_once")
    engine.schedules.sync()    # upsert the declared ones (the clock does it at start)
    engine.schedules.tick()    # fire what is due (the clock does it every second)
"""

from __future__ import annotations

from .declared import Declared, SyncReport, declared, forget_declared, schedule, sync
from .firing import MISSED_AFTER, TickReport, soonest, tick
from .manage import (
    UNSET,
    DeclaredInCode,
    Edited,
    NoSuchSchedule,
    create,
    delete,
    edit,
    find,
    pause,
    resume,
    trigger,
)
from .retention import prune
from .rule import DEFAULT_TIMEZONE, Rule, ScheduleError
from .tables import (
    ALLOW,
    CODE,
    FIRED,
    MISSED,
    OPERATOR,
    RUN_ONCE,
    SKIP,
    SKIPPED,
    Schedule,
    Tick,
)

__all__ = [  # noqa: RUF022 - grouped by purpose
    # declaring in code
    "schedule",
    "sync",
    "declared",
    "forget_declared",
    "Declared",
    "SyncReport",
    # the clock
    "tick",
    "soonest",
    "TickReport",
    "MISSED_AFTER",
    "prune",
    # operators
    "create",
    "edit",
    "Edited",
    "DeclaredInCode",
    "NoSuchSchedule",
    "UNSET",
    "pause",
    "resume",
    "trigger",
    "delete",
    "find",
    # the rule and the tables
    "Rule",
    "ScheduleError",
    "DEFAULT_TIMEZONE",
    "Schedule",
    "Tick",
    "SKIP",
    "RUN_ONCE",
    "ALLOW",
    "FIRED",
    "SKIPPED",
    "MISSED",
    "CODE",
    "OPERATOR",
]
