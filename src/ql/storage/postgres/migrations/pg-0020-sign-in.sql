-- People sign in (DESIGN §9): a principal may have a password (only its Argon2id hash, with the
-- parameters it was made with), and a sign-in creates a session, stored like an API token (only
-- its digest) with a kind, an idle timeout and a label for people.

ALTER TABLE ql3.api_tokens ADD COLUMN kind text NOT NULL DEFAULT 'api',
  ADD COLUMN idle_timeout_ms bigint,
  ADD COLUMN label text NOT NULL DEFAULT '',
  ADD CONSTRAINT api_tokens_kind_check CHECK (kind IN ('api', 'session')),
  ADD CONSTRAINT api_tokens_idle_timeout_check CHECK (idle_timeout_ms > 0),
  ADD CONSTRAINT api_tokens_label_check CHECK (length(label) <= 200);

CREATE TABLE ql3.principal_passwords (
  principal_id text NOT NULL,
  hash text NOT NULL,
  must_change boolean NOT NULL DEFAULT false,
  set_at_ms bigint NOT NULL,
  failed_attempts bigint NOT NULL DEFAULT 0,
  locked_until_ms bigint,
  -- A second factor (RFC 6238 TOTP): the base32 secret, whether it is confirmed, the last step
  -- a code was used for (a code is never accepted twice), and the SHA-256 digests of the
  -- unused recovery codes (space-separated).
  totp_secret text NOT NULL DEFAULT '',
  totp_enabled boolean NOT NULL DEFAULT false,
  totp_last_step bigint NOT NULL DEFAULT 0,
  recovery_digests text NOT NULL DEFAULT '',
  CONSTRAINT principal_passwords_pkey PRIMARY KEY (principal_id),
  CONSTRAINT principal_passwords_principal_fkey FOREIGN KEY (principal_id)
    REFERENCES ql3.principals (id),
  CONSTRAINT principal_passwords_hash_check CHECK (hash LIKE '$argon2id$%'),
  CONSTRAINT principal_passwords_failed_attempts_check CHECK (failed_attempts >= 0)
);
