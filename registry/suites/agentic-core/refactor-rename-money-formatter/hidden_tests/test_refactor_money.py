import shop.money
from shop.formatting import format_cents
from shop.invoice import invoice_lines


def test_old_name_is_gone():
    assert not hasattr(shop.money, "fmt")


def test_invoice_uses_new_formatter():
    assert invoice_lines([("tea", 350), ("refund", -1999)]) == ["tea: 3.50 EUR", "refund: -19.99 EUR"]


def test_large_amounts():
    assert format_cents(100_000_000) == "1,000,000.00 EUR"
    assert format_cents(0) == "0.00 EUR"
