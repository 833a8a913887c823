-- A sample of production orders
INSERT INTO orders (id, customer, placed_on, total) VALUES
  (1, 'Ada Lovelace', '2026-01-04', '12.50'),
  (2, 'Grace Hopper', '2026-01-05', '1,234.00'),
  (3, 'Karl Weber', '2026-01-05', '0.99'),
  (4, 'Ada Lovelace', '2026-01-09', NULL),
  (5, 'Lin Mei', '2026-01-10', '250.00');
