from shop.formatting import format_cents


def test_format_cents():
    assert format_cents(123456) == "1,234.56 EUR"
    assert format_cents(-5) == "-0.05 EUR"
