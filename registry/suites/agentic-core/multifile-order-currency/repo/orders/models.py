from dataclasses import dataclass


@dataclass
class Order:
    id: str
    amount_cents: int
