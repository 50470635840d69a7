-- Leadership: the lease row of the Postgres leader backend, and the history
-- of the leader's heartbeat (a fenced write every second, for operators and
-- for the scenario tests that check fencing).

-- +goose Up

-- The lease of the Postgres leader backend (EDIHUB_LEADER_BACKEND=postgres).
-- Expiry is judged by the database clock (now()) in single statements, so the
-- replicas' clocks never matter. token grows by one at every acquisition and
-- is the term's fencing token; holder '' means released.
CREATE TABLE leader_leases (
    name         text        PRIMARY KEY,
    holder       text        NOT NULL DEFAULT '',
    token        bigint      NOT NULL,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    renewed_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- One row per accepted heartbeat of the leader, written through the fenced
-- path: tokens never decrease in id order, and no row carries a stale token.
-- Rows older than the retention are deleted by the heartbeat itself.
CREATE TABLE leader_heartbeats (
    id       bigserial   PRIMARY KEY,
    lease    text        NOT NULL,
    token    bigint      NOT NULL,
    holder   text        NOT NULL,
    beat_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX leader_heartbeats_beat_at_idx ON leader_heartbeats (lease, beat_at);

-- +goose Down
DROP TABLE leader_heartbeats;
DROP TABLE leader_leases;
