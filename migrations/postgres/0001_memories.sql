-- Memories: typed observations and session summaries, per subject.
-- Rows are never updated; retention and Forget delete them.
CREATE TABLE memories (
    id BIGSERIAL PRIMARY KEY,
    subject TEXT NOT NULL,
    memory_type TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    -- The structured content as JSON.
    content TEXT NOT NULL,
    -- The scopes a principal must hold.
    scopes TEXT[] NOT NULL DEFAULT '{}',
    request_id TEXT NOT NULL,
    turn BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    search TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')
    ) STORED
);
CREATE INDEX memories_by_subject ON memories (subject, id);
CREATE INDEX memories_by_subject_type ON memories (subject, memory_type, id);
CREATE INDEX memories_by_subject_age ON memories (subject, created_at_ms);
CREATE INDEX memories_search ON memories USING GIN (search);

-- Idempotency keys of Retain calls, per subject, and the ids they stored.
CREATE TABLE retain_keys (
    key TEXT NOT NULL,
    subject TEXT NOT NULL,
    ids BIGINT[] NOT NULL DEFAULT '{}',
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (subject, key)
);
CREATE INDEX retain_keys_by_age ON retain_keys (created_at_ms);

