-- Removes keys whose deadline is at or before ARGV[1] (at most ARGV[2] of them). KEYS =
-- keys, exp, stats; ARGV[3] the bucket's `k:` prefix, [4] its `w:` prefix. Returns
-- {{key, the expiry's version, the expired value's version, watchers...}, ...}: each expired key is returned by exactly one
-- call, so its watchers get exactly one DELETE notification whichever node sweeps.
local out = {}
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])) do
  local data = ARGV[3] .. key
  local found = redis.call('HMGET', data, 'v', 's')
  if found[1] then
    remove_key(data, KEYS[1], KEYS[2], KEYS[3], key, found[1])
    out[#out + 1] = append_members({key, expiry_version(KEYS[3], found[2], ARGV[1]), found[2]}, ARGV[4] .. key)
  else
    redis.call('ZREM', KEYS[2], key)
  end
end
return out
