-- The end-of-day report: what its figures need that was not stored, and who
-- holds a report's mail claim.

-- +goose Up

-- One row per duplicate answered: a partner resent a Message-ID that was
-- already received and processed, and got the first answer again. A row per
-- event (not a counter on the message) so that a resend is counted on the
-- day it came, in any report time zone. Rows go with their message.
CREATE TABLE duplicates (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   bigint      NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    partner      text        NOT NULL,
    answered_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX duplicates_answered_at_idx ON duplicates (answered_at);

-- One row per leader-gated write (or term opening) refused for a stale
-- fencing token, written outside the refused transaction. The Prometheus
-- counter edihub_fencing_rejections_total is per process; this is the
-- hub's history, for the report. Rejections are rare: nothing deletes them.
CREATE TABLE fencing_rejections (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lease        text        NOT NULL,
    token        bigint      NOT NULL,
    rejected_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fencing_rejections_rejected_at_idx ON fencing_rejections (rejected_at);

-- mail_claimed_by: who claimed the report's mail (the leader's identity,
-- or the edihub report command), so a term can tell its own claim from an
-- operator's claim made under the same fencing token.
ALTER TABLE reports ADD COLUMN mail_claimed_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE reports DROP COLUMN mail_claimed_by;
DROP TABLE fencing_rejections;
DROP TABLE duplicates;
