-- Shop database, schema version 7
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer TEXT NOT NULL,
  placed_on TEXT NOT NULL,
  total TEXT
);
