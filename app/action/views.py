"""The action page: one action in its whole tree. The live tree with its failure path, the
timeline of its steps and children, its history, arguments, result and errors; and the
operator's commands on it (cancel, retry, retry with a new timeout, skip, approve, reject).

The page is a static head, the commands (``action/_commands.html``) and a live fragment
(``action/_live.html``) that polls itself while anything in the tree is pending or
performing. The live fragment's URL carries the status the commands were rendered for:
when the action's status has changed, the commands come along out of band, so a form is
never replaced while the operator fills it in, yet never stays stale after a change.
Every command answers with the commands and the live fragment (htmx) or a redirect back
to the page (without JavaScript).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flask import Blueprint, abort, redirect, request, url_for
from sqlalchemy import select
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response

from engine import clock, commands, history, status
from engine.commands import CommandResult
from engine.commands.skip import SKIPPABLE
from engine.models import Action

from ..database import db
from ..schedules import queries as queries_schedules
from ..schemas import finite_float, refuse_constant
from ..security import users
from ..security.auth import current_user, requires
from ..views import command_response, is_htmx, render, wants_fragment
from . import (
    queries_attempts,
    queries_signals,
    queries_timeline,
    queries_tree,
    step_source,
    tree_graph,
    tree_model,
)
from .command_refusals import refusal

bp = Blueprint("action", __name__)

#: The longest timeout an operator may give in the studio (a typo guard: 30 days).
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600
#: Views whose arguments the live fragment's URL carries along.
LIVE_PARAMS = ("expand", "history", "before", "view")
#: How the tree is shown: the nested list, the graph, or both side by side (the default
#: for a tree of up to tree_model.SMALL_TREE actions; a bigger one opens with the list).
VIEWS = ("list", "graph", "both")
#: The largest id the database stores (BIGINT): a bigger one names no action.
MAX_ID = 2**63 - 1
#: JSON's names of the values that are not objects.
JSON_TYPES: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


# --- reading -------------------------------------------------------------------------------


@bp.get("/actions/<int:action_id>")
def show(action_id: int) -> Response:
    """The whole page, or (htmx) its live fragment."""
    context = page(action_id, request.args)
    # The page's head says which schedule tick started the action (a root: a schedule
    # invokes roots); the live fragment, polled, never shows it.
    root = context["action"].root and not wants_fragment()
    context["started_by"] = queries_schedules.started_by(db.session(), action_id) if root else None
    return render("action/show.html", "action/_live.html", **context)


@bp.get("/actions/jump")
def jump() -> Response:
    """The header's "jump to an action" form: ``id`` (``42`` or ``#42``) -> its page."""
    text = (request.args.get("id") or "").strip()
    digits = text.removeprefix("#").strip()
    if not digits.isascii() or not digits.isdigit():
        abort(
            400,
            description=f"Jump to an action by its id, a whole number like 42, not {text[:40]!r}."
            if text
            else "Type an action's id (a whole number like 42) to jump to its page.",
        )
    action_id = int(digits)
    if not 0 < action_id <= MAX_ID:
        abort(400, description=f"An action id is a whole number from 1 to {MAX_ID:,}, not {digits[:40]}.")
    if db.session.scalar(select(Action.id).where(Action.id == action_id)) is None:
        abort(
            404, description=f"There is no action {action_id}: it may have been deleted, or the id is wrong."
        )
    return redirect(url_for("action.show", action_id=action_id), code=303)


@bp.get("/actions/<int:action_id>/live")
def live(action_id: int) -> Response:
    """The live fragment alone: it polls this while the tree runs. The commands in it are
    new when the action's status differs from the one they were rendered for, else the
    page keeps its own."""
    context = page(action_id, request.args)
    context["commands_stale"] = request.args.get("commands_for") not in (
        None,
        context["action"].status,
    )
    return render("action/_live_answer.html", **context)


def page(action_id: int, args: MultiDict[str, str] | dict[str, str]) -> dict[str, Any]:
    """Everything the page shows, read in a bounded number of queries."""
    session = db.session
    action = session.get(Action, action_id) if 0 < action_id <= MAX_ID else None
    if action is None:
        abort(
            404,
            description=f"There is no action {action_id}: it may have been deleted, or the link is wrong.",
        )
    tree = queries_tree.load_tree_of_root(session, action.tree_id)
    if tree is None or action.id not in tree.nodes:
        abort(404, description=f"The tree of action {action_id} (root {action.tree_id}) was not found.")
    node = tree.nodes[action.id]
    path = tree.failure_path()
    keep_open = set(tree.ancestors(action.id)) | (set(path.ids) if path is not None else set())
    expand = args.get("expand") == "all"
    whole_tree = args.get("history") == "tree"
    before = _int(args.get("before"))
    view = args.get("view") or ("both" if len(tree) <= tree_model.SMALL_TREE else "list")
    if view not in VIEWS:
        abort(400, description=f"The view must be one of {', '.join(VIEWS)}, not {view!r}.")
    events, older = queries_timeline.history(
        session, action_id=action.id, tree_id=action.tree_id, whole_tree=whole_tree, before=before
    )
    leaf_traceback = None
    if path is not None and path.invocation is None and path.leaf.id != action.id and path.leaf.error_class:
        leaf_traceback = session.scalar(select(Action.error_traceback).where(Action.id == path.leaf.id))
    params: dict[str, Any] = {k: v for k in LIVE_PARAMS if (v := args.get(k))}
    now = clock.now()
    names = {**step_source.names_in(tree), **tree.compensation_names()}
    errors, runs = queries_timeline.errors_and_runs(session, action.id, node.steps)
    shape = step_source.declared(action.actor_type, action.name)
    arguments = list(action.arguments_json or [])
    return {
        "action": action,
        "node": node,
        "tree": tree,
        "view": view,
        "view_param": args.get("view"),
        "rows": tree.rows(expand=expand, keep_open=frozenset(keep_open)) if view != "graph" else [],
        "graph": tree_graph.layout(tree, path, action.id, names) if view != "list" else None,
        "expand": expand,
        "path": path,
        "path_steps": {s.id for s in path.steps if s is not None} if path is not None else set(),
        "leaf_traceback": leaf_traceback,
        "parents": [
            (step, tree.nodes[step.action_id]) for step in tree.steps.values() if action.id in step.children
        ],
        "replaced": sorted(
            (n for n in tree.nodes.values() if n.superseded_by_id == action.id), key=lambda n: n.id
        ),
        "timeline": queries_timeline.timeline(tree, action.id, now, step_names=names),
        "errors": errors,
        "runs": runs,
        "events": events,
        "event_actions": queries_timeline.invocation_actions(session, events),
        "older": older,
        "whole_tree": whole_tree,
        "before": before,
        "step_names": names,
        # Every step of the tree by id: "step <its declared name>", else "step N"; a
        # compensation's step says what it undoes.
        "step_labels": tree.step_labels(names),
        "compensations": tree.compensations,
        # This action's own compensations, in turn (once it compensates).
        "undoing": [c for c in tree.compensations_of(action.id) if c.sequence],
        "arguments": pretty(action.arguments_json),
        "named_arguments": [
            (name, pretty(value))
            for name, value in (
                shape.named(arguments) if shape else [(f"#{i + 1}", v) for i, v in enumerate(arguments)]
            )
        ],
        "declared": shape,
        "arguments_json": json.dumps(action.arguments_json, ensure_ascii=False, default=str),
        "result": pretty(action.result) if action.result is not None else None,
        "running": tree.running,
        # Links in the tree: this prefix and an id (url_for a thousand times is slow).
        "href": url_for("action.show", action_id=0)[:-1],
        "failing": tree_model.FAILING,
        "live_url": url_for("action.live", action_id=action.id, commands_for=action.status, **params),
        "view_url": lambda v: url_for(
            "action.show", action_id=action.id, **{**params, "view": v, "before": None}
        ),
        "can_command": (user := current_user()) is not None and user.can(users.OPERATOR),
        "cancellable": action.status in status.INCOMPLETE,
        # A compensated action's work was undone: it does not carry on where it stopped.
        "retryable": action.status in status.RETRYABLE
        and not any(c.sequence for c in tree.compensations_of(action.id)),
        # A compensating action's failed compensation: retry it, or (if it never became an
        # action) complete it by hand.
        "compensation_failed": next(
            (c for c in tree.compensations_of(action.id) if c.status == status.COMPENSATION_FAILED), None
        ),
        "approvable": action.outbound and action.status in status.INCOMPLETE,
        "skippable": skippable(tree, node),
        "leaf_skippable": path is not None and path.invocation is None and skippable(tree, path.leaf),
        **queries_signals.panel(session, action, node.steps),
        **queries_attempts.panel(session, action, node.steps),
        "now": now,
        "commands_oob": False,
        "live_oob": False,
    }


def skippable(tree: tree_model.Tree, node: tree_model.Node) -> bool:
    """A failed leaf: it failed by itself, every action below it succeeded."""
    return (
        node.status in SKIPPABLE
        and not node.foreign
        and all(tree.nodes[c].status == status.SUCCEEDED for s in node.steps for c in s.children)
    )


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _int(value: str | None) -> int | None:
    """A positive id from a URL or a form, or None (nothing, or not one)."""
    try:
        number = int(value) if value else None
    except ValueError:
        return None
    return number if number is not None and 0 < number <= MAX_ID else None


# --- commands ------------------------------------------------------------------------------


def in_range(action_id: int) -> None:
    """A 404 for an id no action can have (the database would refuse it, with a 500)."""
    if not 0 < action_id <= MAX_ID:
        abort(404, description=f"There is no action {action_id}, so nothing was changed.")


def operator() -> str | None:
    user = current_user()
    return user.name if user is not None else None


@bp.post("/actions/<int:action_id>/cancel")
@requires(users.OPERATOR)
def cancel(action_id: int) -> Response:
    """Cancel the action and its pending and performing descendants."""
    in_range(action_id)
    reason = _text(request.form.get("reason"))
    result = commands.cancel(action_id, by=operator(), reason=reason, cause=history.OPERATOR)
    return answer(action_id, result, f"Action {action_id} was cancelled, with the work below it.")


@bp.post("/actions/<int:action_id>/retry")
@requires(users.OPERATOR)
def retry(action_id: int) -> Response:
    """Reopen a failed, timed-out or cancelled action where it stopped; with
    ``timeout_seconds``, under a new timeout."""
    in_range(action_id)
    timeout = _timeout(request.form.get("timeout_seconds"))
    reason = _text(request.form.get("reason"))
    result = commands.retry(action_id, by=operator(), reason=reason, timeout=timeout, cause=history.OPERATOR)
    done = f"Action {action_id} was retried"
    if timeout is not None:
        done += f" with a timeout of {int(timeout.total_seconds())} s"
    return answer(action_id, result, done + ".")


@bp.post("/actions/<int:action_id>/skip")
@requires(users.OPERATOR)
def skip(action_id: int) -> Response:
    """Complete a failed leaf as succeeded, with a note: its parents carry on. ``page``: the
    action whose page the form is on (the failure path offers to skip its leaf)."""
    in_range(action_id)
    note = _text(request.form.get("note"))
    shown = _int(request.form.get("page")) or action_id
    if shown != action_id and db.session.scalar(select(Action.id).where(Action.id == shown)) is None:
        shown = action_id  # answer with the leaf's own page rather than a 404 after the skip
    result = commands.skip(action_id, by=operator(), note=note, cause=history.OPERATOR)
    done = f"Action {action_id} was skipped: it succeeded, and the work waiting on it carries on."
    return answer(action_id, result, done, page_id=shown)


@bp.post("/actions/<int:action_id>/approve")
@requires(users.OPERATOR)
def approve(action_id: int) -> Response:
    """Complete an outbound action as succeeded, with a note and an optional JSON payload."""
    in_range(action_id)
    result = complete_outbound(commands.approve, action_id)
    return answer(action_id, result, f"Action {action_id} was approved: it succeeded.")


@bp.post("/actions/<int:action_id>/reject")
@requires(users.OPERATOR)
def reject(action_id: int) -> Response:
    """Complete an outbound action as failed, with a note and an optional JSON payload."""
    in_range(action_id)
    result = complete_outbound(commands.reject, action_id)
    return answer(action_id, result, f"Action {action_id} was rejected: it failed.")


def complete_outbound(command: Callable[..., CommandResult], action_id: int) -> CommandResult:
    """Approve or reject with the form's note and JSON payload."""
    payload = _payload(request.form.get("payload"))
    note = _text(request.form.get("note"))
    return command(action_id, by=operator(), note=note, payload=payload, cause=history.OPERATOR)


def answer(action_id: int, result: CommandResult, done: str, page_id: int | None = None) -> Response:
    """The command's message, with the commands and the live fragment of the page it was
    sent from (htmx; ``page_id``, by default the action's own) or a redirect back to it."""
    if result.reason == "not_found":
        abort(404, description=f"There is no action {action_id}, so nothing was changed.")
    session = db.session
    session.expire_all()
    message = done if result else refusal(db.session, action_id, result)
    shown = page_id if page_id is not None else action_id
    context = page(shown, {}) if is_htmx() else {}
    context["live_oob"] = True
    return command_response(
        message,
        ok=bool(result),
        fragment="action/_command_answer.html",
        redirect_to=url_for("action.show", action_id=shown),
        **context,
    )


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _timeout(value: str | None) -> timedelta | None:
    text = (value or "").strip()
    if not text:
        return None
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        abort(
            400,
            description="The new timeout must be a whole number of seconds from 1 to "
            f"{MAX_TIMEOUT_SECONDS:,} (30 days), not {text!r}, so nothing was changed.",
        )
    return timedelta(seconds=seconds)


def _payload(value: str | None) -> dict[str, Any] | None:
    text = (value or "").strip()
    if not text:
        return None
    try:
        payload = json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except json.JSONDecodeError as error:
        abort(
            400,
            description=f"The payload is not valid JSON ({error.msg} at line {error.lineno}, column "
            f"{error.colno}), so nothing was changed. Correct it, or leave it empty.",
        )
    except (ValueError, RecursionError):  # a number of thousands of digits, or nesting
        abort(
            400,
            description="The payload is too deeply nested, or holds a number too long, so nothing "
            "was changed. Send a flatter JSON object.",
        )
    if not isinstance(payload, dict):
        abort(
            400,
            description='The payload must be a JSON object, like {"approved": true}, not '
            f"{JSON_TYPES.get(type(payload), 'that')}, so nothing was changed.",
        )
    return payload
