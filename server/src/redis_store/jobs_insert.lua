-- Adds a job unless one with its id exists: its record (hash: r = revision, d = JSON), its
-- place in the index of jobs (by id), the things it runs on (a list the rollout reads a batch
-- at a time), and its rollout (last of the list of rollouts, from the first thing).
-- KEYS: job, index, things, rollouts   ARGV: id, job JSON, thing, thing, ...
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'r', 0, 'd', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
for i = 3, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
redis.call('RPUSH', KEYS[4], ARGV[1])
return 1
