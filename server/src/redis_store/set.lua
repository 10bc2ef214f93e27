-- SET. ARGV[3] value, [4] condition (A always, N not exists, E not exists or equal),
-- [5] deadline or '', [6] fencing token or '', [7] [8] [9] the engine's candidate version
-- (wall, counter, node), [10] max keys, [11] max bytes (-1: none).
-- Returns {expired, 'A' (or 'C' when it made the key), version, replaced version ('' when it
--         made the key), watchers...}
--       | {expired, 'N', current version} | {expired, 'E', error}.
local expired = expire_if_due()
local key, value, presented = ARGV[1], ARGV[3], ARGV[6]
local found = redis.call('HMGET', KEYS[1], 'v', 's', 'f')
local current, stored, token = found[1], found[2], found[3]
local refused = fencing_error(token, presented)
if refused then return {expired, 'E', refused} end
local condition = ARGV[4]
if current and (condition == 'N' or (condition == 'E' and current ~= value)) then
  return {expired, 'N', stored}
end
local added_keys = current and 0 or 1
local added_bytes = #key + #value - (current and (#key + #current) or 0)
local counts = redis.call('HMGET', KEYS[5], 'keys', 'bytes', 'newest')
local keys, bytes = tonumber(counts[1] or 0), tonumber(counts[2] or 0)
-- a write that does not grow a measure never fails on it
local function fits(limit, old, new)
  return new <= old or limit < 0 or new <= limit
end
if not (fits(tonumber(ARGV[10]), keys, keys + added_keys)
    and fits(tonumber(ARGV[11]), bytes, bytes + added_bytes)) then
  return {expired, 'E', 'QuotaExceeded'}
end
-- the version: after the key's and the newest this bucket issued (see version_after)
local version = version_after(ARGV[7], ARGV[8], ARGV[9], {stored, counts[3]})
redis.call('HSET', KEYS[1], 'v', value, 's', version)
if presented ~= '' and (not token or hlc_less(token, presented)) then
  redis.call('HSET', KEYS[1], 'f', presented)
end
local deadline = ARGV[5]
if deadline ~= '' then
  redis.call('HSET', KEYS[1], 'x', deadline)
  redis.call('ZADD', KEYS[4], deadline, key)
elseif current then
  redis.call('HDEL', KEYS[1], 'x')
  redis.call('ZREM', KEYS[4], key)
end
if not current then
  redis.call('ZADD', KEYS[3], 0, key)
end
redis.call('HINCRBY', KEYS[5], 'keys', added_keys)
redis.call('HINCRBY', KEYS[5], 'bytes', added_bytes)
redis.call('HSET', KEYS[5], 'newest', version)
return append_members({expired, current and 'A' or 'C', version, stored or ''}, KEYS[2])
