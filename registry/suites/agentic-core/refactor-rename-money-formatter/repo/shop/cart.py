from shop.money import cents, fmt


class Cart:
    def __init__(self) -> None:
        self.lines: list[tuple[str, int]] = []

    def add(self, name: str, price: str) -> None:
        self.lines.append((name, cents(price)))

    def total(self) -> str:
        return fmt(sum(price for _, price in self.lines))
