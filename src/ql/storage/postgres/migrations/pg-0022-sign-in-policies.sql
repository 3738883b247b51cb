-- Sign-in policies (DESIGN §9): a session may be restricted to choosing a password or enrolling
-- a second factor before anything else; the installation says whether a second factor is
-- required, and holds the digest of the one-time set-up code; an OpenID Connect sign-in in
-- progress keeps its state, nonce and PKCE verifier until the provider answers (any replica
-- may receive the answer); one started by `ql login` also keeps the loopback port the answer
-- goes back to and the public key the session token is sealed for. Only the admin role, which signs people in, touches oidc_logins.

ALTER TABLE ql3.api_tokens ADD COLUMN restriction text NOT NULL DEFAULT '',
  ADD CONSTRAINT api_tokens_restriction_check
    CHECK (restriction IN ('', 'password_change', 'totp_enrolment'));

ALTER TABLE ql3.installation ADD COLUMN require_second_factor text NOT NULL DEFAULT 'off',
  ADD COLUMN setup_code_digest text,
  ADD COLUMN setup_code_expires_at_ms bigint,
  ADD CONSTRAINT installation_require_second_factor_check
    CHECK (require_second_factor IN ('off', 'admins', 'everyone')),
  ADD CONSTRAINT installation_setup_code_digest_check
    CHECK (setup_code_digest IS NULL OR length(setup_code_digest) = 64);

CREATE TABLE ql3.oidc_logins (
  state_digest text NOT NULL,
  nonce text NOT NULL,
  code_verifier text NOT NULL,
  client text NOT NULL,
  cli_port integer,
  cli_key text,
  created_at_ms bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  CONSTRAINT oidc_logins_pkey PRIMARY KEY (state_digest),
  CONSTRAINT oidc_logins_state_digest_check CHECK (length(state_digest) = 64),
  CONSTRAINT oidc_logins_nonce_check CHECK (length(nonce) BETWEEN 16 AND 128),
  CONSTRAINT oidc_logins_code_verifier_check CHECK (length(code_verifier) BETWEEN 43 AND 128),
  CONSTRAINT oidc_logins_client_check CHECK (client IN ('panel', 'cli')),
  CONSTRAINT oidc_logins_cli_port_check CHECK (cli_port BETWEEN 1024 AND 65535),
  CONSTRAINT oidc_logins_cli_key_check CHECK (cli_key IS NULL OR length(cli_key) = 43),
  CONSTRAINT oidc_logins_expiry_check CHECK (expires_at_ms > created_at_ms)
);
