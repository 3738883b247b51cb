-- Bearer credentials of the cluster's HTTP API, minted by the admin role (`ql-cluster token
-- create`) and stored only as the SHA-256 digest of the token. The runtime role reads them to
-- authenticate requests; it never writes them.

CREATE TABLE ql3.api_credentials (
  id text NOT NULL,
  name text NOT NULL,
  token_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  revoked_at_ms bigint,
  CONSTRAINT api_credentials_pkey PRIMARY KEY (id),
  CONSTRAINT api_credentials_name_key UNIQUE (name),
  CONSTRAINT api_credentials_token_digest_key UNIQUE (token_digest),
  CONSTRAINT api_credentials_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
  CONSTRAINT api_credentials_token_digest_check CHECK (token_digest ~ '^[0-9a-f]{64}$')
);
