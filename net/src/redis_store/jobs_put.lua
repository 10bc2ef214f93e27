-- Writes a thing's record if its revision is still the one the engine read (compare-and-set),
-- and moves the thing's timers to the record's.
-- KEYS: record (hash: r = revision, d = JSON, t = job ids with a timer), things, timers
-- ARGV: revision read, JSON, thing, then (deadline, job id) pairs
local revision = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if revision ~= tonumber(ARGV[1]) then return 0 end
local thing = ARGV[3]
local old = redis.call('HGET', KEYS[1], 't')
if old then
  for job in string.gmatch(old, '%S+') do redis.call('ZREM', KEYS[3], thing .. ' ' .. job) end
end
local timed = {}
for i = 4, #ARGV, 2 do
  redis.call('ZADD', KEYS[3], ARGV[i], thing .. ' ' .. ARGV[i + 1])
  timed[#timed + 1] = ARGV[i + 1]
end
redis.call('HSET', KEYS[1], 'r', revision + 1, 'd', ARGV[2], 't', table.concat(timed, ' '))
redis.call('SADD', KEYS[2], thing)
return 1
