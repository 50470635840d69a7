-- The pickup poller's claims: one row per file version taken from a
-- connector source (internal/pickup). A claim is written in the fenced
-- transaction that queues the file's outbound message, so that a file
-- version is sent at most once across leaders; the file is archived (or
-- removed) at the source only after that commit, and the claim then
-- marked archived. A claim still 'enqueued' is a file whose archive did
-- not happen (the leader died or the source failed): the next leader
-- archives it without queuing it again.

-- +goose Up
CREATE TABLE pickup_claims (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- source names the connector source; path is the file's name
    -- relative to the source's root.
    source       text        NOT NULL,
    path         text        NOT NULL,
    -- size and version identify the file version taken: version is the
    -- modification time (RFC 3339, UTC, nanoseconds) or the S3 ETag.
    size         bigint      NOT NULL,
    version      text        NOT NULL,
    -- message is the outbound message the file became; NULL once the
    -- message was purged (the claim still keeps the version from being
    -- taken again).
    message      bigint      REFERENCES messages (id) ON DELETE SET NULL,
    -- archive is the source's archive directory when the claim was made;
    -- '' means the file is removed instead. marker is the marker file
    -- that made the file stable ('' without), archived or removed with it.
    archive      text        NOT NULL,
    marker       text        NOT NULL DEFAULT '',
    state        text        NOT NULL DEFAULT 'enqueued' CHECK (state IN ('enqueued', 'archived')),
    fence_token  bigint      NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    archived_at  timestamptz,
    -- last_error is why the last archive attempt failed, for operators.
    last_error   text        NOT NULL DEFAULT '',
    CONSTRAINT pickup_claims_version_key UNIQUE (source, path, size, version)
);
-- The claims whose archive is still to do, per source.
CREATE INDEX pickup_claims_open_idx ON pickup_claims (source, id) WHERE state = 'enqueued';
-- The purge of old archived claims.
CREATE INDEX pickup_claims_archived_idx ON pickup_claims (archived_at) WHERE state = 'archived';

-- +goose Down
DROP TABLE pickup_claims;
