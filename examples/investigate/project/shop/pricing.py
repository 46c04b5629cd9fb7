"""Prices of an order, in cents."""

BULK_QUANTITY = 10
BULK_DISCOUNT_PERCENT = 10


def order_total(unit_cents: int, quantity: int) -> int:
    """The price of `quantity` items at `unit_cents` each, with the bulk discount (docs/pricing.md)."""
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    total = unit_cents * quantity
    if quantity > BULK_QUANTITY:
        total -= total * BULK_DISCOUNT_PERCENT // 100
    return total
