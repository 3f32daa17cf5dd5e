from orders.models import Order


def summary(order: Order) -> str:
    return f"Order {order.id}: {order.amount_cents / 100:.2f} EUR"
