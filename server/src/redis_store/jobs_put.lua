-- Writes things' records of one bucket, each if its revision is still the one the engine read
-- (a compare-and-set per thing: one thing's loss does not stop the others), moves each thing's
-- timers to its record's, and applies the change of the counts of latest executions per job
-- and status (each job's counts of this bucket, one hash per job). One call per bucket: a
-- rollout batch's writes are as many scripts as the buckets they fall in, not one per thing.
-- KEYS: things, timers, then per thing: its record (hash: r = revision, d = JSON, t = job ids
--       with a timer), then the counts of each job in its tally
-- ARGV: number of things, then per thing: revision read, JSON, thing, number of timers,
--       (deadline, job id) pairs, number of counts, (status, change) pairs, one per count key
-- Returns: per thing, 1 written or 0 (another write came first)
local written = {}
local k, a = 3, 2
for i = 1, tonumber(ARGV[1]) do
  local record = KEYS[k]
  local read, json, thing = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2]
  local timers = tonumber(ARGV[a + 3])
  local first_timer = a + 4
  local counts_at = first_timer + 2 * timers
  local counts = tonumber(ARGV[counts_at])
  local revision = tonumber(redis.call('HGET', record, 'r') or '0')
  if revision == read then
    local old = redis.call('HGET', record, 't')
    if old then
      for job in string.gmatch(old, '%S+') do redis.call('ZREM', KEYS[2], thing .. ' ' .. job) end
    end
    local timed = {}
    for t = first_timer, counts_at - 1, 2 do
      redis.call('ZADD', KEYS[2], ARGV[t], thing .. ' ' .. ARGV[t + 1])
      timed[#timed + 1] = ARGV[t + 1]
    end
    redis.call('HSET', record, 'r', revision + 1, 'd', json, 't', table.concat(timed, ' '))
    redis.call('SADD', KEYS[1], thing)
    for c = 1, counts do
      local at = counts_at + 2 * c - 1
      redis.call('HINCRBY', KEYS[k + c], ARGV[at], ARGV[at + 1])
    end
    written[i] = 1
  else
    written[i] = 0
  end
  k = k + 1 + counts
  a = counts_at + 1 + 2 * counts
end
return written
