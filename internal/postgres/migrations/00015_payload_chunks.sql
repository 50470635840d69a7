-- Payloads of any size. A bytea value holds at most 1 GB and is built whole
-- in a server process's memory (and in pgx's buffers), so a payload
-- received by streaming (internal/receiver's spool) is stored in pieces:
-- its payloads row has chunked = true and empty data, and its bytes are its
-- payload_chunks rows in seq order (1 MiB each, the last shorter). They
-- are written with COPY in the transaction that stores the message, read
-- one row at a time, and deleted with their payload (the purger deletes
-- payloads rows). Large objects would stream too, but they are not
-- deleted with their rows (an orphan per purge bug), need their own
-- privileges and are not dumped with the tables that refer to them.

-- +goose Up
ALTER TABLE payloads ADD COLUMN chunked boolean NOT NULL DEFAULT false;

CREATE TABLE payload_chunks (
    message_id  bigint  NOT NULL REFERENCES payloads (message_id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    data        bytea   NOT NULL,
    PRIMARY KEY (message_id, seq)
);
-- Out of line, uncompressed: EDI payloads compress well, but pglz at 1 MiB
-- a piece took most of the time of storing a large payload, and AS2
-- partners compress what is worth it before they send.
ALTER TABLE payload_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- +goose Down
DROP TABLE payload_chunks;
ALTER TABLE payloads DROP COLUMN chunked;
