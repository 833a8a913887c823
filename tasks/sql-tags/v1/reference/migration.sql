-- CR-088: tags in their own table
BEGIN;
CREATE TABLE post_tags (
  post_id INTEGER NOT NULL REFERENCES posts(id),
  tag TEXT NOT NULL,
  PRIMARY KEY (post_id, tag)
);
WITH RECURSIVE split(post_id, tag, rest) AS (
  SELECT id, NULL, tags || ',' FROM posts WHERE tags IS NOT NULL
  UNION ALL
  SELECT post_id, trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)
    FROM split WHERE rest <> ''
)
INSERT OR IGNORE INTO post_tags (post_id, tag)
  SELECT post_id, tag FROM split WHERE tag IS NOT NULL AND tag <> '';
ALTER TABLE posts DROP COLUMN tags;
COMMIT;
