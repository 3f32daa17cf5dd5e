from shop import money


def invoice_lines(items: list[tuple[str, int]]) -> list[str]:
    return [f"{name}: {money.fmt(price)}" for name, price in items]
