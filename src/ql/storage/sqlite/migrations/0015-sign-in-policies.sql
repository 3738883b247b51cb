-- Sign-in policies (DESIGN §9): a session may be restricted to choosing a password or enrolling
-- a second factor before anything else; the installation says whether a second factor is
-- required, and holds the digest of the one-time set-up code printed at first start; an OpenID
-- Connect sign-in in progress keeps its state, nonce and PKCE verifier until the provider
-- answers (any replica may receive the answer); one started by `ql login` also keeps the
-- loopback port the answer goes back to and the public key the session token is sealed for.

ALTER TABLE api_tokens ADD COLUMN restriction TEXT NOT NULL DEFAULT ''
  CHECK (restriction IN ('', 'password_change', 'totp_enrolment'));

ALTER TABLE installation ADD COLUMN require_second_factor TEXT NOT NULL DEFAULT 'off'
  CHECK (require_second_factor IN ('off', 'admins', 'everyone'));
ALTER TABLE installation ADD COLUMN setup_code_digest TEXT
  CHECK (setup_code_digest IS NULL OR length(setup_code_digest) = 64);
ALTER TABLE installation ADD COLUMN setup_code_expires_at_ms INTEGER;

CREATE TABLE oidc_logins (
  state_digest TEXT NOT NULL PRIMARY KEY CHECK (length(state_digest) = 64),
  nonce TEXT NOT NULL CHECK (length(nonce) BETWEEN 16 AND 128),
  code_verifier TEXT NOT NULL CHECK (length(code_verifier) BETWEEN 43 AND 128),
  client TEXT NOT NULL CHECK (client IN ('panel', 'cli')),
  cli_port INTEGER CHECK (cli_port BETWEEN 1024 AND 65535),
  cli_key TEXT CHECK (cli_key IS NULL OR length(cli_key) = 43),
  created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL CHECK (expires_at_ms > created_at_ms)
) STRICT;
