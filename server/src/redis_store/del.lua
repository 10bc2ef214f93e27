-- DEL, or VDEL with ARGV[3] = 'V' and ARGV[4] the value; ARGV[5] fencing token or '';
-- ARGV[6] [7] [8] the engine's candidate version of the deletion (wall, counter, node).
-- Returns {expired, 'D', version, the deleted value's version, watchers...} | {expired, 'absent'}
--       | {expired, 'M'} (VDEL's value did not match) | {expired, 'E', error}.
local expired = expire_if_due()
local found = redis.call('HMGET', KEYS[1], 'v', 's', 'f')
local current, stored, token = found[1], found[2], found[3]
if not current then return {expired, 'absent'} end
local refused = fencing_error(token, ARGV[5])
if refused then return {expired, 'E', refused} end
if ARGV[3] == 'V' and current ~= ARGV[4] then return {expired, 'M'} end
remove_key(KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[1], current)
-- The deletion's version follows the key's and the newest this bucket issued, and becomes the
-- newest: a SET of the same key that runs next (from any node) gets a later one.
local version = version_after(ARGV[6], ARGV[7], ARGV[8], {stored, redis.call('HGET', KEYS[5], 'newest')})
redis.call('HSET', KEYS[5], 'newest', version)
return append_members({expired, 'D', version, stored}, KEYS[2])
