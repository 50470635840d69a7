-- Outbound messages of any size. A message built as a stream (larger than
-- EDIHUB_SPOOL_FROM_BYTES) is frozen like any other, so that every retry
-- and resend posts the same bytes with the MIC computed when they were
-- built, but in pieces: its outbox row has body_chunked = true, an empty
-- body and body_size, and the bytes are its outbox_body_chunks rows in seq
-- order (1 MiB each, the last shorter), written with COPY in the
-- transaction that freezes the build and deleted with the row.

-- +goose Up
ALTER TABLE outbox
    ADD COLUMN body_chunked boolean NOT NULL DEFAULT false,
    ADD COLUMN body_size    bigint;

CREATE TABLE outbox_body_chunks (
    outbox_id   bigint  NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    data        bytea   NOT NULL,
    PRIMARY KEY (outbox_id, seq)
);
-- Encrypted and compressed bytes do not compress again.
ALTER TABLE outbox_body_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- +goose Down
DROP TABLE outbox_body_chunks;
ALTER TABLE outbox DROP COLUMN body_size, DROP COLUMN body_chunked;
