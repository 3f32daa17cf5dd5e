import pytest

from tickets.sla import needs_review, touches
from tickets.workflow import Ticket


def test_cannot_close_open_ticket():
    with pytest.raises(ValueError):
        Ticket("t").apply("close")


def test_ticket_life():
    ticket = Ticket("printer on fire")
    for action in ("start", "resolve", "reopen", "resolve", "reopen", "resolve"):
        ticket.apply(action)
    assert ticket.reopened == 2
    assert touches(ticket) == 6
    assert needs_review(ticket)
    ticket.apply("close")
    assert ticket.state == "closed"
    assert ticket.history[-1] == "resolved"
