-- GET. Returns {expired, value or false, version or false}.
local expired = expire_if_due()
local found = redis.call('HMGET', KEYS[1], 'v', 's')
return {expired, found[1], found[2]}
