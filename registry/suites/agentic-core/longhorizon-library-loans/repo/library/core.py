"""A lending library."""


class Library:
    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.loans: dict[str, str] = {}

    def add(self, item_id: str, title: str) -> None:
        self.items[item_id] = title

    def checkout(self, item_id, member_id):
        if item_id not in self.items:
            raise KeyError(item_id)
        if item_id in self.loans:
            raise ValueError(f"{item_id} is already lent out")
        self.loans[item_id] = member_id
