-- Users, their API tokens, console sessions, login throttling and the audit
-- log (internal/auth, docs/users.md). Passwords are argon2id PHC strings;
-- API tokens are stored as their SHA-256 only, never in clear.

-- +goose Up

-- A user signs in with a password (password_hash), an OpenID Connect
-- identity (oidc_issuer, oidc_subject), or both. Names are unique whatever
-- their case: "Alice" and "alice" are one user. session_epoch is bumped when
-- the user is disabled or its password changes: a console session carrying
-- an older epoch is no longer valid.
CREATE TABLE users (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL CHECK (name <> ''),
    role           text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    password_hash  text,
    oidc_issuer    text,
    oidc_subject   text,
    disabled_at    timestamptz,
    session_epoch  bigint      NOT NULL DEFAULT 0,
    last_login_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    created_by     text        NOT NULL,
    CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL))
);
CREATE UNIQUE INDEX users_name_key ON users (lower(name));
CREATE UNIQUE INDEX users_oidc_key ON users (oidc_issuer, oidc_subject);

-- A user's API tokens. role is at most the user's role when the token is
-- made; a request carrying it gets the lesser of the token's role and the
-- user's current one. A revoked token keeps its row (the audit log names
-- it); its name is free again for a new token.
CREATE TABLE api_tokens (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name          text        NOT NULL CHECK (name <> ''),
    token_hash    bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    role          text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text        NOT NULL,
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE UNIQUE INDEX api_tokens_name_key ON api_tokens (user_id, lower(name)) WHERE revoked_at IS NULL;

-- Console sessions, as github.com/alexedwards/scs/postgresstore reads and
-- writes them (it deletes expired rows itself).
CREATE TABLE sessions (
    token   text        PRIMARY KEY,
    data    bytea       NOT NULL,
    expiry  timestamptz NOT NULL
);
CREATE INDEX sessions_expiry_idx ON sessions (expiry);

-- Every action and change: who (actor), when (at), what (action, target,
-- detail) and from where (remote: the client's IP, '' from the command
-- line). Listings page by id, newest first: the actor and target indexes
-- carry id for that; at serves time ranges and the purger.
CREATE TABLE audit_log (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text        NOT NULL,
    action  text        NOT NULL,
    target  text        NOT NULL DEFAULT '',
    detail  jsonb       NOT NULL DEFAULT '{}',
    remote  text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_target_idx ON audit_log (target, id);

-- Failed logins per key ("user:alice", "ip:203.0.113.7"), shared by every
-- replica so that throttling holds whichever replica a request reaches.
-- locked_until: attempts are refused until then.
CREATE TABLE login_failures (
    key           text        PRIMARY KEY,
    failures      integer     NOT NULL CHECK (failures >= 0),
    first_at      timestamptz NOT NULL,
    last_at       timestamptz NOT NULL,
    locked_until  timestamptz
);
CREATE INDEX login_failures_last_at_idx ON login_failures (last_at);

-- +goose Down
DROP TABLE login_failures;
DROP TABLE audit_log;
DROP TABLE sessions;
DROP TABLE api_tokens;
DROP TABLE users;
