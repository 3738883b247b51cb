-- An attempt's log_path is stored relative to the log root (data/log) from now on, so a data
-- directory can be moved, or restored from a backup into another place, and its logs still
-- read. An absolute path written before keeps what follows the root: <task>/<run>/<n>.log, or
-- <task>/<run>.log for a log written before each attempt had its own. A relative path, or an
-- absolute one of another shape, is left as it is.

UPDATE run_attempts
SET log_path = CASE
    WHEN substr(run_attempts.log_path, -length(tails.per_attempt) - 1) = '/' || tails.per_attempt
      THEN tails.per_attempt
    ELSE tails.per_run
  END
FROM (SELECT a.id AS attempt_id,
             r.task_id || '/' || r.id || '/' || a.attempt || '.log' AS per_attempt,
             r.task_id || '/' || r.id || '.log' AS per_run
      FROM run_attempts a JOIN runs r ON r.id = a.run_id) AS tails
WHERE tails.attempt_id = run_attempts.id
  AND substr(run_attempts.log_path, 1, 1) = '/'
  AND (substr(run_attempts.log_path, -length(tails.per_attempt) - 1) = '/' || tails.per_attempt
       OR substr(run_attempts.log_path, -length(tails.per_run) - 1) = '/' || tails.per_run);
