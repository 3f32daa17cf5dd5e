from decimal import Decimal

from billing.invoice import total


def test_lines_rounded_before_summing():
    assert total([(1, Decimal("0.005")), (1, Decimal("0.005"))]) == Decimal("0.02")


def test_credits_clamped_at_zero():
    assert total([(1, Decimal("5.00")), (-2, Decimal("4.00"))]) == Decimal("0.00")
    assert total([(3, Decimal("5.00")), (-1, Decimal("4.00"))]) == Decimal("11.00")


def test_two_decimals():
    assert str(total([(3, Decimal("1"))])) == "3.00"
    assert str(total([])) == "0.00"
