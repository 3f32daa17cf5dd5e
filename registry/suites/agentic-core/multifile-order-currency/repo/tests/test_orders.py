from orders.models import Order
from orders.parse import from_dict
from orders.render import summary
from orders.serialize import to_dict


def test_round_trip_default():
    order = from_dict({"id": "A1", "amount_cents": 1250})
    assert to_dict(order) == {"id": "A1", "amount_cents": 1250, "currency": "EUR"}


def test_summary_currency():
    assert summary(Order("B2", 999, "USD")) == "Order B2: 9.99 USD"


def test_summary_default():
    assert summary(Order("C3", 100)) == "Order C3: 1.00 EUR"
