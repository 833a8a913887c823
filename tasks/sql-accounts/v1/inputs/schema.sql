-- Ledger database, schema version 3
CREATE TABLE accounts (
  id INTEGER PRIMARY KEY,
  owner TEXT NOT NULL,
  currency TEXT,
  balance_cents INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX accounts_owner ON accounts(owner);

CREATE TABLE transfers (
  id INTEGER PRIMARY KEY,
  from_account INTEGER NOT NULL REFERENCES accounts(id),
  to_account INTEGER NOT NULL REFERENCES accounts(id),
  amount_cents INTEGER NOT NULL
);
