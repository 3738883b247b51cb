-- Remote execution at run time: the granted leases of one worker session are read on every
-- heartbeat and pull (live-lease count, cancel requests), so they get an index of their own
-- that holds only granted leases and stays small however many runs have finished.

CREATE INDEX run_dispatch_leases_by_session ON ql3.run_dispatch_leases (worker_session_id)
  WHERE status = 'granted';
