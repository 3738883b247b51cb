-- Notifications (DESIGN §14): channels (where messages go; credentials only as secret names),
-- rules (which event of which task goes to which channel), what each rule remembers per task
-- (failing or not, what it held back, when it last sent), each channel's rate window, and the
-- transactional outbox: a row is written in the same transaction as the run state change that
-- causes it, and a delivery loop leases, sends and records it. An outbox row's id is the
-- idempotency key every attempt sends. Rows outlive their rule and channel (a deleted channel
-- stays as a tombstone); delivered and dead rows are purged with their run.

CREATE TABLE notification_channels (
  id TEXT NOT NULL PRIMARY KEY CHECK (length(id) = 36),
  project_id TEXT NOT NULL REFERENCES projects (id),
  name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
  type TEXT NOT NULL CHECK (type IN ('webhook', 'smtp', 'feishu', 'dingtalk', 'wecom',
                                     'telegram', 'slack', 'discord', 'bark')),
  config_json TEXT NOT NULL CHECK (length(config_json) BETWEEN 2 AND 8192),
  created_by TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  deleted_at_ms INTEGER
) STRICT;

-- One live channel per name in a project.
CREATE UNIQUE INDEX notification_channels_live_name ON notification_channels (project_id, name)
  WHERE deleted_at_ms IS NULL;

CREATE TABLE notification_rules (
  id TEXT NOT NULL PRIMARY KEY CHECK (length(id) = 36),
  project_id TEXT NOT NULL REFERENCES projects (id),
  channel_id TEXT NOT NULL REFERENCES notification_channels (id),
  event TEXT NOT NULL CHECK (event IN ('failed', 'timed_out', 'recovered', 'succeeded', 'skipped',
                                       'recovery_required', 'late', 'missing', 'approval')),
  task_id TEXT,
  mode TEXT NOT NULL CHECK (mode IN ('change', 'every')),
  min_interval_ms INTEGER NOT NULL CHECK (min_interval_ms >= 0),
  threshold_ms INTEGER CHECK (threshold_ms IS NULL OR threshold_ms > 0),
  created_by TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX notification_rules_project ON notification_rules (project_id, id);

CREATE TABLE notification_rule_states (
  rule_id TEXT NOT NULL,
  task_id TEXT NOT NULL,
  failing INTEGER NOT NULL CHECK (failing IN (0, 1)),
  suppressed INTEGER NOT NULL CHECK (suppressed >= 0),
  last_sent_at_ms INTEGER,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (task_id, rule_id)
) STRICT;

CREATE TABLE notification_channel_states (
  channel_id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL,
  window_started_at_ms INTEGER NOT NULL,
  sent_in_window INTEGER NOT NULL CHECK (sent_in_window >= 0)
) STRICT;

CREATE INDEX notification_channel_states_project ON notification_channel_states (project_id);

CREATE TABLE notification_outbox (
  id TEXT NOT NULL PRIMARY KEY CHECK (length(id) = 36),
  project_id TEXT NOT NULL,
  channel_id TEXT NOT NULL,
  rule_id TEXT,
  event TEXT NOT NULL,
  task_id TEXT,
  run_id TEXT,
  payload_json TEXT NOT NULL CHECK (length(payload_json) BETWEEN 2 AND 16384),
  status TEXT NOT NULL CHECK (status IN ('pending', 'delivering', 'delivered', 'dead')),
  attempts INTEGER NOT NULL CHECK (attempts >= 0),
  next_attempt_at_ms INTEGER NOT NULL,
  deadline_at_ms INTEGER NOT NULL,
  lease_owner TEXT,
  lease_until_ms INTEGER,
  last_status_code INTEGER,
  last_error TEXT,
  last_latency_ms INTEGER,
  created_at_ms INTEGER NOT NULL,
  delivered_at_ms INTEGER,
  CHECK ((status = 'delivering') = (lease_owner IS NOT NULL AND lease_until_ms IS NOT NULL)),
  CHECK ((status = 'delivered') = (delivered_at_ms IS NOT NULL))
) STRICT;

-- The delivery loop's scan: what is due, by time.
CREATE INDEX notification_outbox_due ON notification_outbox (next_attempt_at_ms)
  WHERE status = 'pending';
CREATE INDEX notification_outbox_leased ON notification_outbox (lease_until_ms)
  WHERE status = 'delivering';
CREATE INDEX notification_outbox_project ON notification_outbox (project_id, created_at_ms);
CREATE INDEX notification_outbox_run ON notification_outbox (run_id) WHERE run_id IS NOT NULL;
