-- A sample of production posts
INSERT INTO posts (id, title, tags) VALUES
  (1, 'Hello SQLite', 'sql,databases'),
  (2, 'Migrations without downtime', 'sql, ops, migrations'),
  (3, 'A quiet post', NULL),
  (4, 'Release notes 4.2', 'releases');
