"""Service-level checks on a ticket's history."""

from tickets.workflow import Ticket


def touches(ticket: Ticket) -> int:
    """How many state changes the ticket went through."""
    return len(ticket.history) - 1


def needs_review(ticket: Ticket) -> bool:
    """Tickets reopened twice or more are reviewed."""
    return ticket.reopened > 2
