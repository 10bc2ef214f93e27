-- A SCAN batch: up to ARGV[3] keys of the bucket in lexical order from ARGV[1] to ARGV[2]
-- (ZRANGEBYLEX bounds), without those whose deadline is at or before ARGV[4]. KEYS = keys,
-- exp. Returns {examined, last examined or false, live keys...}.
local batch = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
local out = {#batch, batch[#batch] or false}
local now = tonumber(ARGV[4])
for _, key in ipairs(batch) do
  local deadline = redis.call('ZSCORE', KEYS[2], key)
  if not deadline or tonumber(deadline) > now then
    out[#out + 1] = key
  end
end
return out
