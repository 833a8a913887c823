-- CR-207: order totals in integer cents (exact: no floating point on the way)
BEGIN;
ALTER TABLE orders ADD COLUMN total_cents INTEGER;
UPDATE orders
   SET total_cents = CAST(replace(replace(total, ',', ''), '.', '') AS INTEGER)
 WHERE total IS NOT NULL;
ALTER TABLE orders DROP COLUMN total;
CREATE INDEX orders_customer_day ON orders(customer, placed_on);
COMMIT;
