-- Claims a job's things from..from+count-1 if its rollout's next thing is still `from`, and
-- with a job record given, writes it in the same step if its revision is still the one read:
-- all or nothing (each thing is handed to exactly one node; a rollout's pace records each
-- claim). A rollout that hands out its last thing ends. Answers {} when another node came
-- first, else {1, thing, thing, ...}.
-- KEYS: rollouts (list of job ids), cursors (hash: job id -> next thing), the job's things,
--       the job's record
-- ARGV: job id, from, count[, revision read, job JSON]
local id = ARGV[1]
if not redis.call('LPOS', KEYS[1], id) then return {} end
local next = tonumber(redis.call('HGET', KEYS[2], id) or '0')
if next ~= tonumber(ARGV[2]) then return {} end
if ARGV[4] then
  local revision = redis.call('HGET', KEYS[4], 'r')
  if not revision or tonumber(revision) ~= tonumber(ARGV[4]) then return {} end
  redis.call('HSET', KEYS[4], 'r', revision + 1, 'd', ARGV[5])
end
local total = redis.call('LLEN', KEYS[3])
local last = math.min(next + tonumber(ARGV[3]), total)
local claimed = {1}
if last > next then
  for _, thing in ipairs(redis.call('LRANGE', KEYS[3], next, last - 1)) do
    claimed[#claimed + 1] = thing
  end
else
  last = next
end
if last >= total then
  redis.call('LREM', KEYS[1], 0, id)
  redis.call('HDEL', KEYS[2], id)
else
  redis.call('HSET', KEYS[2], id, last)
end
return claimed
