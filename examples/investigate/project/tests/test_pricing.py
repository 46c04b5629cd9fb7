import unittest

from shop.pricing import order_total


class OrderTotalTest(unittest.TestCase):
    def test_a_small_order_pays_full_price(self) -> None:
        self.assertEqual(order_total(500, 3), 1500)

    def test_a_large_order_gets_the_bulk_discount(self) -> None:
        self.assertEqual(order_total(500, 12), 5400)

    def test_ten_items_get_the_bulk_discount(self) -> None:
        self.assertEqual(order_total(500, 10), 4500)

    def test_a_negative_quantity_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            order_total(500, -1)


if __name__ == "__main__":
    unittest.main()
