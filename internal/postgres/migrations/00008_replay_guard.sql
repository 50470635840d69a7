-- The replay check's claims: one row per signed content a partner sent
-- within its replay window, keyed by the content's digest. The receiver
-- claims the digest in one statement before it stores the message, so two
-- deliveries of the same signed content under two Message-IDs that arrive
-- at once cannot both pass the check (a lookup in messages sees neither
-- until both are stored). A claim older than the partner's window is taken
-- over; later claims of the partner delete such claims, a few at a time.

-- +goose Up
CREATE TABLE replay_guard (
    partner     text        NOT NULL,
    digest      text        NOT NULL,
    message_id  text        NOT NULL,
    seen_at     timestamptz NOT NULL,
    PRIMARY KEY (partner, digest)
);
CREATE INDEX replay_guard_seen_at_idx ON replay_guard (partner, seen_at);

-- +goose Down
DROP TABLE replay_guard;
