-- Up to ARGV[2] entries of a table in name order after ARGV[1] ('' from the first):
-- {name, value, name, value, ...}.
-- KEYS: values, names
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
local out = {}
for _, name in ipairs(redis.call('ZRANGE', KEYS[2], from, '+', 'BYLEX', 'LIMIT', 0, ARGV[2])) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', KEYS[1], name) or ''
end
return out
