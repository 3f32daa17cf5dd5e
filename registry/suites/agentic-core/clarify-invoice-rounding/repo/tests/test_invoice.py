from decimal import Decimal

from billing.invoice import total


def test_simple_total():
    assert total([(2, Decimal("1.50")), (1, Decimal("0.25"))]) == Decimal("3.25")
