-- A sample of production data (anonymised)
INSERT INTO customers (id, name, email_address, country) VALUES
  (1, 'Ada Lovelace', 'ada@example.com', 'GB'),
  (2, 'Grace Hopper', 'grace@example.com', 'US'),
  (3, 'Karl Weber', 'k.weber@example.de', 'DE'),
  (4, 'Lin Mei', 'lin.mei@example.cn', 'CN');

INSERT INTO orders (id, customer_id, placed_on) VALUES
  (10, 1, '2026-01-04'),
  (11, 1, '2026-02-11'),
  (12, 3, '2026-02-12');
