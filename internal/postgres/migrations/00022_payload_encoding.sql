-- A large payload that arrived compressed (issue 22, the large receive)
-- is stored as the zlib stream it arrived in, not inflated: less than half
-- the bytes for PostgreSQL to write (about 930 MiB for the bench's 2 GiB of
-- EDI). Its payloads row says so: encoding 'zlib', its payload_chunks
-- rows in seq order are that stream, which inflates to inflated_skip
-- bytes (the payload entity's MIME header) and then the payload itself,
-- messages.payload_size bytes (the size everything reports stays the
-- payload's). Readers (Store.WritePayload: the API, the console, the
-- outbox) inflate it as they read. Every row stored before reads as
-- before ('identity': the bytes are the payload). Adding the columns
-- with a constant default rewrites nothing.

-- +goose Up
ALTER TABLE payloads
    ADD COLUMN encoding text NOT NULL DEFAULT 'identity',
    ADD COLUMN inflated_skip bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT payloads_encoding_check CHECK (
        (encoding = 'identity' AND inflated_skip = 0)
        OR (encoding = 'zlib' AND chunked AND inflated_skip >= 0));

-- +goose Down
-- A release before this one would read a zlib stream as the payload: a
-- database that holds one cannot go back (purge or re-receive them
-- first).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM payloads WHERE encoding <> 'identity') THEN
        RAISE EXCEPTION 'payloads stored compressed (encoding zlib) exist: a release before migration 00022 cannot read them';
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE payloads DROP CONSTRAINT payloads_encoding_check,
    DROP COLUMN inflated_skip,
    DROP COLUMN encoding;
