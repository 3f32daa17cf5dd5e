from inventory.reorder import needs_reorder, reorder_quantity
from inventory.stock import Stock


def test_add_accumulates():
    stock = Stock()
    for _ in range(3):
        stock.add("x", 2)
    assert stock.levels == {"x": 6}


def test_exactly_minimum_is_fine():
    stock = Stock()
    stock.add("x", 5)
    assert needs_reorder(stock, {"x": 5}) == []


def test_reorder_rounds_up_to_batches():
    assert reorder_quantity(0, 5, batch=3) == 12
    assert reorder_quantity(10, 5, batch=3) == 0
    assert reorder_quantity(9, 5, batch=4) == 4
