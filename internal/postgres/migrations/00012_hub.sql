-- The console's hub and search, second part.
--
-- What each replica's elector says of itself, so that the console of any
-- replica shows the leader's workers (state, last success, restarts), not
-- only its own. Every replica upserts its row every few seconds and when
-- its leadership changes; nothing here is leader-gated or fenced, and
-- nothing acts on it: it is a view for people.

-- +goose Up

CREATE TABLE replica_status (
    identity   text        PRIMARY KEY,
    is_leader  boolean     NOT NULL,
    -- token is the fencing token of the term the replica leads; 0 while it
    -- follows.
    token      bigint      NOT NULL DEFAULT 0,
    -- status is the elector's status as GET /leader serves it.
    status     jsonb       NOT NULL,
    version    text        NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- A search of a date range lying deep under newer messages reads the
-- range from this index and keeps the newest ids (Messages, rangeIsDeep):
-- with the id in the index that is an index-only scan, and only the page's
-- rows are read from the table. It replaces the index of 00001 on
-- created_at alone, which the report's day queries use the same way.
CREATE INDEX messages_created_at_id_idx ON messages (created_at) INCLUDE (id);
DROP INDEX messages_created_at_idx;

-- +goose Down

CREATE INDEX messages_created_at_idx ON messages (created_at);
DROP INDEX messages_created_at_id_idx;
DROP TABLE replica_status;
