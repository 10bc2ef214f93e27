-- Writes a thing's record if its revision is still the one the engine read (compare-and-set),
-- moves the thing's timers to the record's, and applies the change of the counts of latest
-- executions per job and status (each job's counts of this bucket, one hash per job).
-- KEYS: record (hash: r = revision, d = JSON, t = job ids with a timer), things, timers, then
--       the counts of each job in the tally
-- ARGV: revision read, JSON, thing, number of timers, (deadline, job id) pairs, then
--       (status, change) pairs, one per count key
local revision = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if revision ~= tonumber(ARGV[1]) then return 0 end
local thing = ARGV[3]
local old = redis.call('HGET', KEYS[1], 't')
if old then
  for job in string.gmatch(old, '%S+') do redis.call('ZREM', KEYS[3], thing .. ' ' .. job) end
end
local timed = {}
local timers = tonumber(ARGV[4])
for i = 5, 4 + 2 * timers, 2 do
  redis.call('ZADD', KEYS[3], ARGV[i], thing .. ' ' .. ARGV[i + 1])
  timed[#timed + 1] = ARGV[i + 1]
end
redis.call('HSET', KEYS[1], 'r', revision + 1, 'd', ARGV[2], 't', table.concat(timed, ' '))
redis.call('SADD', KEYS[2], thing)
local at = 5 + 2 * timers
for k = 4, #KEYS do
  redis.call('HINCRBY', KEYS[k], ARGV[at], ARGV[at + 1])
  at = at + 2
end
return 1
