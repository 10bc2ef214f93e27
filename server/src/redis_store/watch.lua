-- KEYNOTIFY. KEYS = w:<key>, c:<client>, leases, stats, r:<client>; ARGV[1] key, [2] client, [3] lease
-- end or '', [4] max watches, [5] max watches per client (-1: none; per bucket).
-- Returns 'OK' or 'QuotaExceeded'.
local key, client = ARGV[1], ARGV[2]
if redis.call('SISMEMBER', KEYS[2], key) == 0 then
  local total = tonumber(redis.call('HGET', KEYS[4], 'watches') or 0)
  local mine = redis.call('SCARD', KEYS[2])
  local max_total, max_mine = tonumber(ARGV[4]), tonumber(ARGV[5])
  if (max_total >= 0 and total >= max_total) or (max_mine >= 0 and mine >= max_mine) then
    return 'QuotaExceeded'
  end
  redis.call('SADD', KEYS[2], key)
  redis.call('SADD', KEYS[1], client)
  redis.call('HINCRBY', KEYS[4], 'watches', 1)
end
-- stamped now, a renewal too (see r:<client> in the prelude)
redis.call('HSET', KEYS[5], key, redis.call('HGET', KEYS[4], 'newest') or '')
if ARGV[3] ~= '' then
  -- a lease is never shortened
  redis.call('ZADD', KEYS[3], 'GT', ARGV[3], client)
end
return 'OK'
