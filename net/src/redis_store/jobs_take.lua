-- Claims up to `budget` targets not yet handed out, oldest rollout first: each target is
-- handed to exactly one node.
-- KEYS: rollouts (list of job ids), cursors (hash: job id -> next target)
-- ARGV: budget, the name of a job's targets list without the job id
local budget = tonumber(ARGV[1])
local claimed = {}
local count = 0
while count < budget do
  local id = redis.call('LINDEX', KEYS[1], 0)
  if not id then break end
  local targets = ARGV[2] .. id
  local next = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  local total = redis.call('LLEN', targets)
  local take = math.min(budget - count, total - next)
  if take > 0 then
    for _, thing in ipairs(redis.call('LRANGE', targets, next, next + take - 1)) do
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = thing
    end
    count = count + take
    next = next + take
  end
  if next >= total then
    redis.call('LPOP', KEYS[1])
    redis.call('HDEL', KEYS[2], id)
  else
    redis.call('HSET', KEYS[2], id, next)
  end
end
return claimed
