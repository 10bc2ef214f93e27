-- Adds a job unless one with its id exists: its JSON, its place in the list of jobs, and its
-- targets (a list the rollout reads a batch at a time).
-- KEYS: job, ids, targets   ARGV: id, job JSON, target, target, ...
if not redis.call('SET', KEYS[1], ARGV[2], 'NX') then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
for i = 3, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
return 1
