-- Run logs of remote attempts, kept in PostgreSQL so no replica holds anything on local disk:
-- append-only chunks keyed by (attempt, byte offset). The per-attempt cap is enforced by the
-- append path under the attempt's lease; output past it is dropped and a truncation event is
-- recorded instead.

CREATE TABLE ql3.run_log_chunks (
  attempt_id text NOT NULL,
  byte_offset bigint NOT NULL,
  run_id text NOT NULL,
  data bytea NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT run_log_chunks_pkey PRIMARY KEY (attempt_id, byte_offset),
  CONSTRAINT run_log_chunks_offset_check CHECK (byte_offset >= 0),
  CONSTRAINT run_log_chunks_data_check CHECK (octet_length(data) BETWEEN 1 AND 1048576),
  CONSTRAINT run_log_chunks_attempt_fkey FOREIGN KEY (attempt_id)
    REFERENCES ql3.run_attempts (id),
  CONSTRAINT run_log_chunks_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id)
);

CREATE TRIGGER run_log_chunks_append_only BEFORE UPDATE OR DELETE ON ql3.run_log_chunks
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
