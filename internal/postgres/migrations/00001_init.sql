-- The first schema: everything the receive, send, MDN, report and leadership
-- paths need. Later changes come as new migrations only.

-- +goose Up

-- One row per AS2 message, inbound or outbound. message_id is the AS2
-- Message-ID exactly as sent or received (brackets included when present);
-- it is unique per partner and direction, which is what makes a resend from
-- a partner a duplicate rather than a second delivery (RFC 4130 section 5.5).
CREATE TABLE messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    direction        text        NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    partner          text        NOT NULL,
    as2_from         text        NOT NULL,
    as2_to           text        NOT NULL,
    message_id       text        NOT NULL,
    status           text        NOT NULL,
    subject          text        NOT NULL DEFAULT '',
    content_type     text        NOT NULL DEFAULT '',
    filename         text        NOT NULL DEFAULT '',
    payload_size     bigint      NOT NULL DEFAULT 0,
    signed           boolean     NOT NULL DEFAULT false,
    encrypted        boolean     NOT NULL DEFAULT false,
    compressed       boolean     NOT NULL DEFAULT false,
    mic              text        NOT NULL DEFAULT '',
    mic_alg          text        NOT NULL DEFAULT '',
    mdn_mode         text        NOT NULL DEFAULT 'none' CHECK (mdn_mode IN ('sync', 'async', 'none')),
    mdn_signed       boolean     NOT NULL DEFAULT false,
    mdn_url          text        NOT NULL DEFAULT '',
    disposition      text        NOT NULL DEFAULT '',
    error            text        NOT NULL DEFAULT '',
    attempts         integer     NOT NULL DEFAULT 0,
    mdn_due_at       timestamptz,
    mdn_overdue      boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    CONSTRAINT messages_partner_direction_message_id_key UNIQUE (partner, direction, message_id)
);
CREATE INDEX messages_created_at_idx ON messages (created_at);
CREATE INDEX messages_status_idx ON messages (direction, status);
CREATE INDEX messages_mdn_due_idx ON messages (mdn_due_at) WHERE mdn_due_at IS NOT NULL AND NOT mdn_overdue;

-- Payload bytes, kept apart from the message row so listing messages never
-- drags documents along.
CREATE TABLE payloads (
    message_id  bigint      PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    data        bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- MDNs kept for non-repudiation: for inbound messages the MDN we answered
-- (returned again, byte for byte, to a partner that resends), for outbound
-- messages the MDN the partner returned.
CREATE TABLE mdns (
    message_id    bigint      PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    content_type  text        NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '{}',
    body          bytea       NOT NULL,
    disposition   text        NOT NULL DEFAULT '',
    mic           text        NOT NULL DEFAULT '',
    signed        boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Async MDNs as received on POST /as2, stored raw and processed later by the
-- leader's MDN poller. processed_at/fence record which term processed it.
CREATE TABLE mdn_inbox (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at          timestamptz NOT NULL DEFAULT now(),
    as2_from             text        NOT NULL DEFAULT '',
    as2_to               text        NOT NULL DEFAULT '',
    content_type         text        NOT NULL,
    headers              jsonb       NOT NULL DEFAULT '{}',
    body                 bytea       NOT NULL,
    original_message_id  text        NOT NULL DEFAULT '',
    processed_at         timestamptz,
    result               text        NOT NULL DEFAULT '',
    fence                bigint
);
CREATE INDEX mdn_inbox_unprocessed_idx ON mdn_inbox (id) WHERE processed_at IS NULL;

-- Work for the outbound dispatchers on every replica: messages to partners
-- and async MDNs we owe them. Claimed with FOR UPDATE SKIP LOCKED; a claim is
-- a lease (claimed_until) so a crashed dispatcher's rows come back.
CREATE TABLE outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL CHECK (kind IN ('message', 'mdn')),
    message_id       bigint      REFERENCES messages (id) ON DELETE CASCADE,
    partner          text        NOT NULL,
    url              text        NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}',
    body             bytea,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 8,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by       text        NOT NULL DEFAULT '',
    claimed_until    timestamptz,
    last_error       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_finished_idx ON outbox (finished_at) WHERE status <> 'pending';

-- One end-of-day report per business day. mail_claimed_* is the fenced claim
-- written before the e-mail leaves, so a failover never mails a day twice.
CREATE TABLE reports (
    day                date        PRIMARY KEY,
    generated_at       timestamptz NOT NULL DEFAULT now(),
    fence              bigint      NOT NULL,
    figures            jsonb       NOT NULL,
    html               text        NOT NULL DEFAULT '',
    csv                text        NOT NULL DEFAULT '',
    mail_claimed_at    timestamptz,
    mail_claimed_fence bigint,
    mailed_at          timestamptz,
    mail_error         text        NOT NULL DEFAULT ''
);

-- The fence: the highest leadership token that has opened a term, per lease.
-- Every leader-gated write checks, in its own transaction, that its token is
-- still the one here.
CREATE TABLE leader_fence (
    lease       text        PRIMARY KEY,
    token       bigint      NOT NULL,
    holder      text        NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now()
);

-- Every term that opened, for audits and for the scenario tests.
CREATE TABLE leader_terms (
    lease       text        NOT NULL,
    token       bigint      NOT NULL,
    holder      text        NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (lease, token)
);

-- +goose Down
DROP TABLE leader_terms;
DROP TABLE leader_fence;
DROP TABLE reports;
DROP TABLE outbox;
DROP TABLE mdn_inbox;
DROP TABLE mdns;
DROP TABLE payloads;
DROP TABLE messages;
