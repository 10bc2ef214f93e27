-- DEL, or VDEL with ARGV[3] = 'V' and ARGV[4] the value; ARGV[5] fencing token or ''.
-- Returns {expired, 'D', version, watchers...} | {expired, 'absent'} | {expired, 'M'} (VDEL's
-- value did not match) | {expired, 'E', error}.
local expired = expire_if_due()
local found = redis.call('HMGET', KEYS[1], 'v', 's', 'f')
local current, stored, token = found[1], found[2], found[3]
if not current then return {expired, 'absent'} end
local refused = fencing_error(token, ARGV[5])
if refused then return {expired, 'E', refused} end
if ARGV[3] == 'V' and current ~= ARGV[4] then return {expired, 'M'} end
remove_key(KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[1], current)
return append_members({expired, 'D', stored}, KEYS[2])
