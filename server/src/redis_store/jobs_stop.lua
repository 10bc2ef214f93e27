-- Stops a job's rollout: its remaining targets are never handed out. Whether it was listed
-- (this call took it off; another, from any node, may have first).
-- KEYS: rollouts, cursors   ARGV: job id
local listed = redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return listed
