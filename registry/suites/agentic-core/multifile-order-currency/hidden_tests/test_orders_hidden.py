import pytest
from orders.parse import from_dict
from orders.render import summary
from orders.serialize import to_dict


def test_round_trip_with_currency():
    data = {"id": "Z", "amount_cents": 5, "currency": "JPY"}
    assert to_dict(from_dict(data)) == data
    assert summary(from_dict(data)) == "Order Z: 0.05 JPY"


@pytest.mark.parametrize("bad", ["eur", "EURO", "", 978])
def test_bad_currency(bad):
    with pytest.raises(ValueError):
        from_dict({"id": "Z", "amount_cents": 5, "currency": bad})
