-- CR-311: customer status and email cleanup
BEGIN;
ALTER TABLE customers RENAME COLUMN email_address TO email;
ALTER TABLE customers ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
CREATE UNIQUE INDEX customers_email ON customers(email);
COMMIT;
