-- Counts learned from the providers' counting endpoints (issue 52), shared by
-- every sidecar on this store, so a fleet sends each piece once, not once per
-- pod. A row is a piece's content tokens under its tokenizer generation and
-- content key (a keyed hash of the text: no text is stored), or, under the
-- generation 'frames', one of a model's three frame probes at one endpoint.
--
-- Bounded by age, best-effort: writers delete rows learned more than 7 days
-- ago, at most 1,000 at a time, about once a minute per sidecar and sooner
-- while there are more (src/memory/store/postgres/counts.rs). The table thus
-- holds at most what the fleet's providers counted in a week, since a sidecar
-- writes only what a provider counted for it (at most its
-- requests_per_minute). A piece in use past that is counted again, once.
CREATE TABLE learned_counts (
    generation TEXT NOT NULL CHECK (octet_length(generation) <= 128),
    key BYTEA NOT NULL CHECK (octet_length(key) = 32),
    tokens INTEGER NOT NULL CHECK (tokens >= 0),
    learned_at_ms BIGINT NOT NULL,
    PRIMARY KEY (generation, key)
);
CREATE INDEX learned_counts_by_age ON learned_counts (learned_at_ms);
