from inventory.reorder import needs_reorder, reorder_quantity
from inventory.stock import Stock


def test_remove_refuses_overdraw():
    stock = Stock()
    stock.add("apple", 3)
    assert not stock.remove("apple", 4)
    assert stock.levels["apple"] == 3


def test_restock_cycle():
    stock = Stock()
    stock.add("apple", 10)
    stock.add("apple", 5)
    assert stock.levels["apple"] == 15

    assert stock.remove("apple", 9)
    stock.add("pear", 4)
    minimum = {"apple": 6, "pear": 2, "plum": 1}
    assert needs_reorder(stock, minimum) == ["plum"]

    assert stock.remove("apple", 1)
    assert needs_reorder(stock, minimum) == ["apple", "plum"]
    assert reorder_quantity(stock.levels["apple"], 6, batch=4) == 8
