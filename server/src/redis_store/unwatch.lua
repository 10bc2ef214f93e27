-- KEYNOTIFY STOP. KEYS and ARGV[1..2] as watch.lua. Returns 1 if there was a registration.
local key, client = ARGV[1], ARGV[2]
if redis.call('SREM', KEYS[2], key) == 0 then return 0 end
redis.call('HDEL', KEYS[5], key)
redis.call('SREM', KEYS[1], client)
redis.call('HINCRBY', KEYS[4], 'watches', -1)
if redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[5])
  redis.call('ZREM', KEYS[3], client)
end
return 1
