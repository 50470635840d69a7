-- AS2 restart (draft-harding-as2-restart): the body of a large message a
-- partner sends with an ETag, kept as it arrives so that an interrupted
-- transfer is resumed (HEAD, then POST with If-Match and Content-Range)
-- on whichever replica the partner reaches next. One restart_transfers
-- row per partner and transfer ID (the ETag): the first request's header
-- fields, the body's total length and how much of it is stored; the
-- bytes in restart_chunks rows keyed by their offset, appended by COPY
-- in transactions that also advance received (only from the offset the
-- row says, so two writers never interleave). A completed transfer is
-- read back to the receiver's spool, processed as any message, and
-- deleted; one left incomplete is deleted by the leader's purger after
-- EDIHUB_AS2_RESTART_EXPIRY without news.

-- +goose Up
CREATE TABLE restart_transfers (
    id          bigserial   PRIMARY KEY,
    partner     text        NOT NULL,
    etag        text        NOT NULL,
    header      jsonb       NOT NULL,
    total       bigint      NOT NULL CHECK (total > 0),
    received    bigint      NOT NULL DEFAULT 0 CHECK (received >= 0 AND received <= total),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (partner, etag)
);
CREATE INDEX restart_transfers_updated ON restart_transfers (updated_at);

CREATE TABLE restart_chunks (
    transfer_id bigint NOT NULL REFERENCES restart_transfers (id) ON DELETE CASCADE,
    off         bigint NOT NULL,
    data        bytea  NOT NULL,
    PRIMARY KEY (transfer_id, off)
);
-- As payload_chunks: AS2 bodies are encrypted or compressed, pglz gains
-- nothing on them.
ALTER TABLE restart_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- +goose Down
DROP TABLE restart_chunks;
DROP TABLE restart_transfers;
