from orders.models import Order


def to_dict(order: Order) -> dict:
    return {"id": order.id, "amount_cents": order.amount_cents}
