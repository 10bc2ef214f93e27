-- The rollouts under way, oldest first: {id, next, total, id, next, total, ...}.
-- KEYS: rollouts, cursors   ARGV: the name of a job's things list without the job id
local out = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  out[#out + 1] = id
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  out[#out + 1] = redis.call('LLEN', ARGV[1] .. id)
end
return out
