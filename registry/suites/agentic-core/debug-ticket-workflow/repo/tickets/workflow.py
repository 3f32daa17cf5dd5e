"""A ticket moves open -> in_progress -> resolved -> closed; resolved may be reopened."""

TRANSITIONS = {
    "open": {"start": "in_progress"},
    "in_progress": {"resolve": "resolved", "pause": "open"},
    "resolved": {"close": "closed", "reopen": "in_progress"},
    "closed": {},
}


class Ticket:
    def __init__(self, title: str) -> None:
        self.title = title
        self.state = "open"
        self.history: list[str] = []
        self.reopened = 0

    def apply(self, action: str) -> None:
        allowed = TRANSITIONS[self.state]
        if action not in allowed:
            raise ValueError(f"cannot {action} a ticket that is {self.state}")
        self.history.append(self.state)
        self.state = allowed[action]
        if action == "reopen":
            self.reopened = 1
