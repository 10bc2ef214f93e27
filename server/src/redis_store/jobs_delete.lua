-- Removes a job, its place in the index, its things and its rollout.
-- KEYS: job, index, things, rollouts, cursors   ARGV: id
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
