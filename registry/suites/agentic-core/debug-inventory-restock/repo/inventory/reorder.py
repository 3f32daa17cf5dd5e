"""Which SKUs to reorder, and how many."""

from inventory.stock import Stock


def needs_reorder(stock: Stock, minimum: dict[str, int]) -> list[str]:
    """SKUs whose level is below their minimum, sorted."""
    return sorted(sku for sku, low in minimum.items() if stock.levels.get(sku, 0) <= low)


def reorder_quantity(level: int, minimum: int, batch: int) -> int:
    """Whole batches needed to get back to at least twice the minimum."""
    missing = 2 * minimum - level
    return max(0, missing // batch) * batch
