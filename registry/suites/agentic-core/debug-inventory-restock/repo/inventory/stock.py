"""Stock levels per SKU."""


class Stock:
    def __init__(self) -> None:
        self.levels: dict[str, int] = {}

    def add(self, sku: str, quantity: int) -> None:
        self.levels[sku] = quantity

    def remove(self, sku: str, quantity: int) -> bool:
        """Take ``quantity`` out if there is enough; returns whether it was taken."""
        if self.levels.get(sku, 0) < quantity:
            return False
        self.levels[sku] -= quantity
        return True
