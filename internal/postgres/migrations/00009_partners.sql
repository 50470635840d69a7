-- Partner profiles live in the database, so that every replica serves a
-- change within seconds without a restart (internal/partners). A profile is
-- its YAML entry (config.PartnerSpec) with its certificates inline; secrets
-- stay files on the replicas and are only named here.
--
-- version counts the changes of one partner (optimistic concurrency: an
-- update names the version it read). revision numbers every change of the
-- whole set, in commit order (writers serialise on an advisory lock), so the
-- highest revision in partner_history is the partner set a replica serves.

-- +goose Up
CREATE TABLE partners (
    as2_id      text        PRIMARY KEY,
    version     bigint      NOT NULL CHECK (version > 0),
    revision    bigint      NOT NULL,
    spec        text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL
);

-- Every change: who made it, when, and what changed (diff, one line per
-- key). spec is the profile after the change; NULL for a delete.
CREATE TABLE partner_history (
    revision    bigint      PRIMARY KEY,
    as2_id      text        NOT NULL,
    version     bigint      NOT NULL,
    op          text        NOT NULL CHECK (op IN ('import', 'create', 'update', 'delete', 'restore')),
    spec        text,
    diff        text        NOT NULL DEFAULT '',
    actor       text        NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX partner_history_partner_idx ON partner_history (as2_id, revision DESC);
CREATE SEQUENCE partner_revisions;

-- The partner set revision each replica serves, so that a replica that lags
-- is visible (GET /api/v1/partners); rows of replicas not seen for an hour
-- are dropped by the next write.
CREATE TABLE partner_replicas (
    identity    text        PRIMARY KEY,
    revision    bigint      NOT NULL,
    applied_at  timestamptz NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now()
);

-- A partner certificate marked switch_on_first_use becomes the one we
-- encrypt to once the partner has signed with it: the first such use is
-- recorded here, for every replica.
CREATE TABLE partner_certificate_uses (
    as2_id         text        NOT NULL,
    fingerprint    text        NOT NULL,
    first_used_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (as2_id, fingerprint)
);

-- +goose Down
DROP TABLE partner_certificate_uses;
DROP TABLE partner_replicas;
DROP SEQUENCE partner_revisions;
DROP TABLE partner_history;
DROP TABLE partners;
