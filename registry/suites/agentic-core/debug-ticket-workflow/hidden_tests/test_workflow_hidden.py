from tickets.sla import needs_review, touches
from tickets.workflow import Ticket


def test_fresh_ticket_has_no_touches():
    assert touches(Ticket("t")) == 0


def test_one_reopen_is_not_reviewed():
    ticket = Ticket("t")
    for action in ("start", "resolve", "reopen"):
        ticket.apply(action)
    assert ticket.reopened == 1 and not needs_review(ticket)


def test_three_reopens():
    ticket = Ticket("t")
    ticket.apply("start")
    for _ in range(3):
        ticket.apply("resolve")
        ticket.apply("reopen")
    assert ticket.reopened == 3 and needs_review(ticket)
