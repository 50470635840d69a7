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

-- +goose Down

DROP TABLE replica_status;
