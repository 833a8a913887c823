-- CRM database, schema version 11
CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email_address TEXT,
  country TEXT NOT NULL DEFAULT 'DE'
);

CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  placed_on TEXT NOT NULL
);

CREATE INDEX orders_customer ON orders(customer_id);
