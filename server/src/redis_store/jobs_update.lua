-- Writes a job if its revision is still the one the engine read (compare-and-set).
-- KEYS: job   ARGV: revision read, JSON
local revision = redis.call('HGET', KEYS[1], 'r')
if not revision or tonumber(revision) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'r', revision + 1, 'd', ARGV[2])
return 1
