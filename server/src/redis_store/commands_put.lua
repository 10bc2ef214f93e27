-- Writes a command's record if its revision is still the one read (compare-and-set; 0: the
-- record must not exist). Its first write keeps it for ARGV[3] ms: when a record is forgotten
-- is fixed when the command is sent, and HSET keeps a key's TTL, so a change does not set it
-- again.
-- KEYS: record (hash: r = revision, d = JSON)
-- ARGV: revision read, JSON, ms to keep
local revision = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if revision ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'r', revision + 1, 'd', ARGV[2])
if revision == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
