-- People sign in (DESIGN §9): a principal may have a password (only its Argon2id hash, with the
-- parameters it was made with), and a sign-in creates a session, stored like an API token (only
-- its digest) with a kind, an idle timeout and a label for people.

ALTER TABLE api_tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'api'
  CHECK (kind IN ('api', 'session'));
ALTER TABLE api_tokens ADD COLUMN idle_timeout_ms INTEGER CHECK (idle_timeout_ms > 0);
ALTER TABLE api_tokens ADD COLUMN label TEXT NOT NULL DEFAULT '' CHECK (length(label) <= 200);

CREATE TABLE principal_passwords (
  principal_id TEXT NOT NULL PRIMARY KEY REFERENCES principals (id),
  hash TEXT NOT NULL CHECK (hash LIKE '$argon2id$%'),
  must_change INTEGER NOT NULL DEFAULT 0 CHECK (must_change IN (0, 1)),
  set_at_ms INTEGER NOT NULL,
  failed_attempts INTEGER NOT NULL DEFAULT 0 CHECK (failed_attempts >= 0),
  locked_until_ms INTEGER,
  -- A second factor (RFC 6238 TOTP): the base32 secret, whether it is confirmed, the last step
  -- a code was used for (a code is never accepted twice), and the SHA-256 digests of the
  -- unused recovery codes (space-separated).
  totp_secret TEXT NOT NULL DEFAULT '',
  totp_enabled INTEGER NOT NULL DEFAULT 0 CHECK (totp_enabled IN (0, 1)),
  totp_last_step INTEGER NOT NULL DEFAULT 0,
  recovery_digests TEXT NOT NULL DEFAULT ''
) STRICT;
