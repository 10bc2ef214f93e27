-- Drops the registrations of clients whose lease ended by ARGV[1] (at most ARGV[2] clients).
-- KEYS = leases, stats; ARGV[3] the bucket's `c:` prefix, [4] its `w:` prefix, [5] its `r:`
-- prefix.
-- Returns {client, registrations, client, registrations, ...}.
local out = {}
for _, client in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])) do
  out[#out + 1] = client
  out[#out + 1] = drop_client(ARGV[3] .. client, ARGV[5] .. client, KEYS[1], KEYS[2], ARGV[4],
    client, nil)
end
return out
