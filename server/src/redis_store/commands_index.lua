-- Adds an uncorrelated command to its answer topic's index (scored by deadline), drops the ids
-- whose deadline has passed, and keeps the index at least as long as the record.
-- KEYS: index
-- ARGV: deadline, id, ms to keep, now
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
