from orders.models import Order


def from_dict(data: dict) -> Order:
    return Order(id=str(data["id"]), amount_cents=int(data["amount_cents"]))
