-- Writes (ARGV[2] = 1, value ARGV[3]) or removes (ARGV[2] = 0) an entry of a table of the
-- operator API or a device shadow (a hash of the values and a sorted set of the names, for
-- paging in name order). ARGV[4]: 0 always; 1 only when there is none; 2 only while it holds
-- ARGV[5] (a compare-and-set). 1 when anything changed.
-- KEYS: values, names   ARGV: name, write, value, condition, expected
if ARGV[2] == '0' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if ARGV[4] == '2' and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[5] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
