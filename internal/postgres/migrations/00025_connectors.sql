-- The connectors document (destinations, sources, routes: see
-- internal/config/connectors.go) lives in the database, so that every
-- replica applies a change within seconds without a restart
-- (internal/connectors). It is stored whole, one row per revision: the
-- highest revision is the document in force, the others its history.
-- Secrets are only named in it; they stay files on the replicas.

-- +goose Up
CREATE TABLE connector_revisions (
    revision       bigint      PRIMARY KEY CHECK (revision > 0),
    document       text        NOT NULL,
    -- summary lists what the revision changed, one line per entry.
    summary        text        NOT NULL DEFAULT '',
    actor          text        NOT NULL,
    -- restored_from is the revision a restore brought back.
    restored_from  bigint      REFERENCES connector_revisions (revision),
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- The revision each replica serves, so that a replica that lags is
-- visible (GET /api/v1/connectors); rows of replicas not seen for an hour
-- are dropped by the next write.
CREATE TABLE connector_replicas (
    identity    text        PRIMARY KEY,
    revision    bigint      NOT NULL,
    applied_at  timestamptz NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE connector_replicas;
DROP TABLE connector_revisions;
