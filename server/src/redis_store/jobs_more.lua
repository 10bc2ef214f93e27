-- Appends things to a job's things (a continuous job's group grew) and starts its rollout
-- again at the first of them if it had ended. Nothing when the job is gone.
-- KEYS: job, things, rollouts, cursors   ARGV: job id, thing, thing, ...
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local before = redis.call('LLEN', KEYS[2])
for i = 2, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
if not redis.call('LPOS', KEYS[3], ARGV[1]) then
  redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('HSET', KEYS[4], ARGV[1], before)
end
return 1
