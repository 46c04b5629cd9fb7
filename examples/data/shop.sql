-- The shop database of the data example: customers, products and their orders.
-- tools.py builds it into workspace/data/shop.db on first use (sqlite3 shop.db < shop.sql does the same).

CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    region TEXT NOT NULL
);

CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    category TEXT NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents > 0)
);

CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
    product_id INTEGER NOT NULL REFERENCES products (product_id),
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    ordered_on TEXT NOT NULL -- ISO date
);

INSERT INTO customers VALUES
    (1, 'Alba Café', 'North'),
    (2, 'Brew Bros', 'South'),
    (3, 'Corner Cup', 'East'),
    (4, 'Daily Grind', 'West'),
    (5, 'Early Bird', 'North'),
    (6, 'Fika House', 'East'),
    (7, 'Good Beans', 'South'),
    (8, 'Half & Half', 'North');

INSERT INTO products VALUES
    (1, 'Espresso beans 1kg', 'coffee', 2400),
    (2, 'Filter papers', 'supplies', 450),
    (3, 'Grinder', 'equipment', 8900),
    (4, 'Milk jug', 'equipment', 1500),
    (5, 'Decaf beans 1kg', 'coffee', 2600),
    (6, 'Cleaning tablets', 'supplies', 900);

INSERT INTO orders VALUES
    (1, 3, 5, 6, '2026-01-11'),
    (2, 2, 6, 1, '2026-01-02'),
    (3, 1, 6, 2, '2026-01-12'),
    (4, 2, 5, 4, '2026-01-02'),
    (5, 4, 1, 5, '2026-01-03'),
    (6, 1, 1, 2, '2026-01-14'),
    (7, 1, 5, 1, '2026-02-21'),
    (8, 1, 6, 2, '2026-02-08'),
    (9, 7, 1, 5, '2026-02-10'),
    (10, 5, 6, 6, '2026-02-04'),
    (11, 2, 2, 3, '2026-02-06'),
    (12, 2, 1, 5, '2026-02-04'),
    (13, 8, 6, 4, '2026-03-07'),
    (14, 6, 5, 5, '2026-03-25'),
    (15, 6, 3, 2, '2026-03-15'),
    (16, 3, 2, 1, '2026-03-26'),
    (17, 5, 6, 4, '2026-03-19'),
    (18, 8, 3, 5, '2026-03-11'),
    (19, 2, 6, 4, '2026-04-03'),
    (20, 6, 1, 4, '2026-04-06'),
    (21, 1, 1, 5, '2026-04-14'),
    (22, 6, 4, 6, '2026-04-19'),
    (23, 8, 5, 1, '2026-04-12'),
    (24, 2, 3, 4, '2026-04-27'),
    (25, 2, 1, 6, '2026-05-23'),
    (26, 5, 5, 3, '2026-05-23'),
    (27, 7, 4, 1, '2026-05-23'),
    (28, 6, 1, 5, '2026-05-15'),
    (29, 8, 1, 2, '2026-05-04'),
    (30, 5, 1, 6, '2026-05-25'),
    (31, 7, 5, 4, '2026-06-08'),
    (32, 3, 5, 4, '2026-06-03'),
    (33, 5, 1, 4, '2026-06-18'),
    (34, 5, 5, 3, '2026-06-28'),
    (35, 7, 2, 2, '2026-06-22'),
    (36, 3, 1, 2, '2026-06-03');
