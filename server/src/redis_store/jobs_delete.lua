-- Removes a job, its place in the index, its things and its rollout; 1 when the job was
-- there (0: another node's call removed it first).
-- KEYS: job, index, things, rollouts, cursors   ARGV: id
local removed = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return removed
