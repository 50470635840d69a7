-- Outbound messages built as a stream (larger than EDIHUB_SPOOL_FROM_BYTES)
-- are no longer frozen as bytes (outbox_body_chunks) but as the inputs of
-- their build: build_inputs holds what the first build drew or read from
-- the clock (the partner profile it used, the time, the multipart
-- boundary, the signature, the content-encryption key, IV and the
-- recipient infos that carry the key), as JSON written by the dispatcher;
-- body_size and body_sha256 are the built body's length and SHA-256. A
-- retry or resend builds the message again from its payload with these
-- inputs and checks the result against them before it posts it. The key
-- decrypts only this message's body, whose payload is stored beside it in
-- payload_chunks; both go with the row. Rows frozen before (body_chunked
-- with outbox_body_chunks rows and no build_inputs) are still posted from
-- their pieces.

-- +goose Up
ALTER TABLE outbox
    ADD COLUMN build_inputs bytea,
    ADD COLUMN body_sha256  bytea;

-- +goose Down
ALTER TABLE outbox DROP COLUMN body_sha256, DROP COLUMN build_inputs;
