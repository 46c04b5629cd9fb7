"""A tiny shop: prices of orders (see docs/pricing.md)."""
