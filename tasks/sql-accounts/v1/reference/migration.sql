-- CR-142: rebuild accounts with a mandatory upper-case currency code
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE accounts_new (
  id INTEGER PRIMARY KEY,
  owner TEXT NOT NULL,
  currency TEXT NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
  balance_cents INTEGER NOT NULL DEFAULT 0
);
INSERT INTO accounts_new (id, owner, currency, balance_cents)
  SELECT id, owner, upper(coalesce(currency, 'EUR')), balance_cents FROM accounts;
DROP TABLE accounts;
ALTER TABLE accounts_new RENAME TO accounts;
CREATE INDEX accounts_owner ON accounts(owner);
COMMIT;
PRAGMA foreign_keys = ON;
