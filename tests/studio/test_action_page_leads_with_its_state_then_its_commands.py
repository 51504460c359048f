"""Given an action's page, it leads with its state (the status, large, and what it is doing),
then the operator's commands, then the tree and the rest. A poll keeps the commands the page
has (a note being typed stays) until the action's status changes; a command's answer brings
the new commands, and the live fragment keeps them in their place.

Not a spec case: the studio is ours (issue 12, §4: the action page leads with its state).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from engine import commands, testing
from tests.domain import Car
from tests.studio.action_page_scenarios import waiting_order
from tests.studio.support import HTMX, StudioClient

KEPT = '<section id="action-commands" class="panel action-commands" hx-preserve="true"></section>'


def test_the_state_comes_before_the_commands_and_the_commands_before_the_tree(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    root, _ = waiting_order(session, car)

    page = operator_client.get(f"/actions/{root.id}").text

    state = page.index('class="state"')
    commands = page.index('<section id="action-commands"')
    assert state < commands < page.index('id="tree-title"')
    assert page.index('<div id="action-live"') < state
    assert f'action="/actions/{root.id}/cancel"' in page[commands:]


def test_a_command_answers_with_the_new_commands_and_the_live_fragment_keeps_them_in_place(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    root, _ = waiting_order(session, car)

    answer = operator_client.command(f"/actions/{root.id}/cancel", {"reason": "no"}).text

    assert answer.lstrip().startswith('<section id="action-commands"')
    assert f'action="/actions/{root.id}/retry"' in answer
    live = answer[answer.index('<div id="action-live"') :]
    assert KEPT in live
    assert live.count('id="action-commands"') == 1


def test_a_poll_brings_new_commands_only_when_the_status_changed(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    root, approval = waiting_order(session, car)

    same = viewer_client.get(f"/actions/{root.id}/live?commands_for=performing", headers=HTMX).text
    assert KEPT in same

    commands.approve(approval.id, by="webhook")
    testing.drain()
    changed = viewer_client.get(f"/actions/{root.id}/live?commands_for=performing", headers=HTMX).text
    assert KEPT not in changed
    assert '<section id="action-commands"' in changed and 'data-status="succeeded"' in changed
