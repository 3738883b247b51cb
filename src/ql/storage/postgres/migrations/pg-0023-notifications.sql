-- Notifications (DESIGN §14): channels (where messages go; credentials only as secret names),
-- rules (which event of which task goes to which channel), what each rule remembers per task
-- (failing or not, what it held back, when it last sent), each channel's rate window, and the
-- transactional outbox: a row is written in the same transaction as the run state change that
-- causes it, and a delivery loop leases (FOR UPDATE SKIP LOCKED: two replicas never claim one
-- row), sends and records it. An outbox row's id is the idempotency key every attempt sends.
-- Rows outlive their rule and channel (a deleted channel stays as a tombstone); delivered and
-- dead rows are purged with their run.

CREATE TABLE ql3.notification_channels (
  id text NOT NULL,
  project_id text NOT NULL,
  name text NOT NULL,
  type text NOT NULL,
  config_json text NOT NULL,
  created_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  deleted_at_ms bigint,
  CONSTRAINT notification_channels_pkey PRIMARY KEY (id),
  CONSTRAINT notification_channels_id_check CHECK (length(id) = 36),
  CONSTRAINT notification_channels_name_check CHECK (length(name) BETWEEN 1 AND 64),
  CONSTRAINT notification_channels_type_check CHECK (type IN ('webhook', 'smtp', 'feishu',
    'dingtalk', 'wecom', 'telegram', 'slack', 'discord', 'bark')),
  CONSTRAINT notification_channels_config_json_check
    CHECK (length(config_json) BETWEEN 2 AND 8192),
  CONSTRAINT notification_channels_project_fkey FOREIGN KEY (project_id)
    REFERENCES ql3.projects (id)
);

-- One live channel per name in a project.
CREATE UNIQUE INDEX notification_channels_live_name ON ql3.notification_channels (project_id, name)
  WHERE deleted_at_ms IS NULL;

CREATE TABLE ql3.notification_rules (
  id text NOT NULL,
  project_id text NOT NULL,
  channel_id text NOT NULL,
  event text NOT NULL,
  task_id text,
  mode text NOT NULL,
  min_interval_ms bigint NOT NULL,
  threshold_ms bigint,
  created_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT notification_rules_pkey PRIMARY KEY (id),
  CONSTRAINT notification_rules_id_check CHECK (length(id) = 36),
  CONSTRAINT notification_rules_event_check CHECK (event IN ('failed', 'timed_out', 'recovered',
    'succeeded', 'skipped', 'recovery_required', 'late', 'missing', 'approval')),
  CONSTRAINT notification_rules_mode_check CHECK (mode IN ('change', 'every')),
  CONSTRAINT notification_rules_min_interval_check CHECK (min_interval_ms >= 0),
  CONSTRAINT notification_rules_threshold_check CHECK (threshold_ms IS NULL OR threshold_ms > 0),
  CONSTRAINT notification_rules_project_fkey FOREIGN KEY (project_id)
    REFERENCES ql3.projects (id),
  CONSTRAINT notification_rules_channel_fkey FOREIGN KEY (channel_id)
    REFERENCES ql3.notification_channels (id)
);

CREATE INDEX notification_rules_by_project ON ql3.notification_rules (project_id, id);

CREATE TABLE ql3.notification_rule_states (
  rule_id text NOT NULL,
  task_id text NOT NULL,
  failing boolean NOT NULL,
  suppressed bigint NOT NULL,
  last_sent_at_ms bigint,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT notification_rule_states_pkey PRIMARY KEY (task_id, rule_id),
  CONSTRAINT notification_rule_states_suppressed_check CHECK (suppressed >= 0)
);

CREATE TABLE ql3.notification_channel_states (
  channel_id text NOT NULL,
  project_id text NOT NULL,
  window_started_at_ms bigint NOT NULL,
  sent_in_window bigint NOT NULL,
  CONSTRAINT notification_channel_states_pkey PRIMARY KEY (channel_id),
  CONSTRAINT notification_channel_states_sent_check CHECK (sent_in_window >= 0)
);

CREATE INDEX notification_channel_states_by_project
  ON ql3.notification_channel_states (project_id);

CREATE TABLE ql3.notification_outbox (
  id text NOT NULL,
  project_id text NOT NULL,
  channel_id text NOT NULL,
  rule_id text,
  event text NOT NULL,
  task_id text,
  run_id text,
  payload_json text NOT NULL,
  status text NOT NULL,
  attempts integer NOT NULL,
  next_attempt_at_ms bigint NOT NULL,
  deadline_at_ms bigint NOT NULL,
  lease_owner text,
  lease_until_ms bigint,
  last_status_code integer,
  last_error text,
  last_latency_ms bigint,
  created_at_ms bigint NOT NULL,
  delivered_at_ms bigint,
  CONSTRAINT notification_outbox_pkey PRIMARY KEY (id),
  CONSTRAINT notification_outbox_id_check CHECK (length(id) = 36),
  CONSTRAINT notification_outbox_payload_check CHECK (length(payload_json) BETWEEN 2 AND 16384),
  CONSTRAINT notification_outbox_status_check
    CHECK (status IN ('pending', 'delivering', 'delivered', 'dead')),
  CONSTRAINT notification_outbox_attempts_check CHECK (attempts >= 0),
  CONSTRAINT notification_outbox_lease_check
    CHECK ((status = 'delivering') = (lease_owner IS NOT NULL AND lease_until_ms IS NOT NULL)),
  CONSTRAINT notification_outbox_delivered_check
    CHECK ((status = 'delivered') = (delivered_at_ms IS NOT NULL))
);

-- The delivery loop's scan: what is due, by time.
CREATE INDEX notification_outbox_due ON ql3.notification_outbox (next_attempt_at_ms, id)
  WHERE status = 'pending';
CREATE INDEX notification_outbox_leased ON ql3.notification_outbox (lease_until_ms, id)
  WHERE status = 'delivering';
CREATE INDEX notification_outbox_by_project
  ON ql3.notification_outbox (project_id, created_at_ms, id);
CREATE INDEX notification_outbox_by_run ON ql3.notification_outbox (run_id)
  WHERE run_id IS NOT NULL;
