-- Writes (ARGV[2] = 1, value ARGV[3]) or removes (ARGV[2] = 0) an entry of a table of the
-- operator API (a hash of the values and a sorted set of the names, for paging in name
-- order); with ARGV[4] = 1 only when there is none. 1 when anything changed.
-- KEYS: values, names   ARGV: name, write, value, create
if ARGV[2] == '0' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
