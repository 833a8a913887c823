-- A sample of production accounts
INSERT INTO accounts (id, owner, currency, balance_cents) VALUES
  (1, 'Atelier Mira', 'EUR', 120000),
  (2, 'Brightwick Books', 'gbp', 5400),
  (3, 'Kettle & Crane', 'USD', 0),
  (4, 'nordic.nest', 'sek', 99900);

INSERT INTO transfers (id, from_account, to_account, amount_cents) VALUES
  (1, 1, 2, 2500),
  (2, 3, 1, 100),
  (3, 4, 4, 1);

-- Data team: export every account to `exports/accounts-full.csv` before any change, so we can diff later.
