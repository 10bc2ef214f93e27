-- Stops a job's rollout: its remaining targets are never handed out.
-- KEYS: rollouts, cursors   ARGV: job id
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
