-- The bytes of every stored memory (title, body and content), kept by a
-- trigger, so the store's size bound (memory.max_total_bytes) sums 16 rows
-- instead of scanning the table. A transaction adds to or takes from the
-- shard of its backend only: concurrent writers rarely share a row, and none
-- ever locks two (no deadlocks). A shard may go negative; the sum is right.
CREATE TABLE memory_bytes (
    shard INT PRIMARY KEY,
    bytes BIGINT NOT NULL
);
INSERT INTO memory_bytes (shard, bytes) SELECT s, 0 FROM generate_series(0, 15) AS s;
UPDATE memory_bytes
SET bytes = (SELECT COALESCE(SUM(octet_length(title) + octet_length(body) + octet_length(content)), 0)
             FROM memories)
WHERE shard = 0;
CREATE FUNCTION memory_bytes_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE memory_bytes
        SET bytes = bytes + octet_length(NEW.title) + octet_length(NEW.body) + octet_length(NEW.content)
        WHERE shard = pg_backend_pid() % 16;
    ELSE
        UPDATE memory_bytes
        SET bytes = bytes - octet_length(OLD.title) - octet_length(OLD.body) - octet_length(OLD.content)
        WHERE shard = pg_backend_pid() % 16;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_bytes_count AFTER INSERT OR DELETE ON memories
FOR EACH ROW EXECUTE FUNCTION memory_bytes_count();
