-- Memory ids on the wire are random (32 lower-case hex digits of a random
-- UUID), never the row id: a counter would let a caller guess the ids of
-- other memories. The row id stays the internal order (paging, retention).
ALTER TABLE memories ADD COLUMN public_id TEXT;
UPDATE memories SET public_id = replace(gen_random_uuid()::text, '-', '');
ALTER TABLE memories
    ALTER COLUMN public_id SET NOT NULL,
    ALTER COLUMN public_id SET DEFAULT replace(gen_random_uuid()::text, '-', '');
CREATE UNIQUE INDEX memories_by_public_id ON memories (public_id);

-- Idempotency keys answer the public ids of the memories they stored. Keys
-- of memories deleted since lose those ids (a replay answers the others).
ALTER TABLE retain_keys ADD COLUMN memory_ids TEXT[] NOT NULL DEFAULT '{}';
UPDATE retain_keys AS k SET memory_ids = ARRAY(
    SELECT m.public_id FROM unnest(k.ids) WITH ORDINALITY AS u(id, n)
    JOIN memories AS m ON m.id = u.id
    ORDER BY u.n
);
ALTER TABLE retain_keys DROP COLUMN ids;
