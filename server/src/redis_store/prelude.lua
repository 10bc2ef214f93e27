-- Shared by every mqstore script (prepended to each). Layout, per bucket `{P}{bN}:` (one hash
-- slot, so every script runs on a Redis Cluster):
--   k:<key>     hash: v = value, s = version, f = fencing token, x = deadline (ms)
--   w:<key>     set of the clients watching <key>
--   c:<client>  set of the keys of this bucket <client> watches
--   r:<client>  hash: key -> the bucket's newest version when <client> last registered it
--               ('' when the bucket had none): a registration made after a change has a
--               stamp not older than the change's version
--   keys        sorted set of the bucket's keys, all scored 0 (SCAN's lexical order)
--   exp         sorted set: key -> deadline
--   leases      sorted set: client -> end of its registrations' lease
--   stats       hash: keys, bytes (keys and values), watches, newest (the newest version a
--               SET or a deletion issued here: versions only grow), syncs (reads made to wait for replicas)
-- The rules are the store's (mqstore::store): fencing, NX/NEX, quotas, the version rule.

local MAX_COUNTER = 2147483647

-- wall, counter, node of an HLC `wall:counter:node`
local function hlc_split(text)
  local wall, counter, node = string.match(text, '^(%d+):(%d+):(.*)$')
  return tonumber(wall), tonumber(counter), node
end

-- whether HLC `a` is older than `b` (wall clock, then counter, then node id)
local function hlc_less(a, b)
  local aw, ac, an = hlc_split(a)
  local bw, bc, bn = hlc_split(b)
  if aw ~= bw then return aw < bw end
  if ac ~= bc then return ac < bc end
  return an < bn
end

-- the padded wire form, as the engine writes it
local function hlc_format(wall, counter, node)
  return string.format('%015d:%05d:%s', wall, counter, node)
end

-- The version of a change: the candidate (wall, counter, node), unless one of `seen` (the key's
-- stored version, the newest version the bucket ever issued; nil where there is none) is not
-- older (another node's clock ran ahead); then the logical time right after it. So versions
-- issued in a bucket only grow, whatever the nodes' clocks say: a lock taken after another
-- holder's (its key expired or deleted) gets a higher fencing token, and a deletion and a
-- concurrent SET never share one.
local function version_after(wall, counter, node, seen)
  wall, counter = tonumber(wall), tonumber(counter)
  for i = 1, 2 do
    if seen[i] then
      local seen_wall, seen_counter = hlc_split(seen[i])
      if seen_wall > wall or (seen_wall == wall and seen_counter >= counter) then
        if seen_counter < MAX_COUNTER then
          wall, counter = seen_wall, seen_counter + 1
        else
          wall, counter = seen_wall + 1, 0
        end
      end
    end
  end
  return hlc_format(wall, counter, node)
end

-- Removes a key of the bucket: its hash, its index entries and its share of the counts.
local function remove_key(data, keys, exp, stats, key, value)
  redis.call('DEL', data)
  redis.call('ZREM', keys, key)
  redis.call('ZREM', exp, key)
  redis.call('HINCRBY', stats, 'keys', -1)
  redis.call('HINCRBY', stats, 'bytes', -(#key + #value))
end

-- Appends the members of set `name` to `out`.
local function append_members(out, name)
  for _, member in ipairs(redis.call('SMEMBERS', name)) do
    out[#out + 1] = member
  end
  return out
end

-- Drops the registrations `client` has in this bucket (`stamps` its r: hash): every one, or
-- with `before` (a version) those made before the change of that version — one the client
-- was found not listening for, where a registration made since (by the client back again)
-- must stay. Returns how many it dropped.
local function drop_client(client_keys, stamps, leases, stats, watch_prefix, client, before)
  local dropped = 0
  for _, key in ipairs(redis.call('SMEMBERS', client_keys)) do
    local stamp = before and redis.call('HGET', stamps, key)
    if not (stamp and stamp ~= '' and not hlc_less(stamp, before)) then
      redis.call('SREM', watch_prefix .. key, client)
      redis.call('SREM', client_keys, key)
      redis.call('HDEL', stamps, key)
      dropped = dropped + 1
    end
  end
  if redis.call('SCARD', client_keys) == 0 then
    redis.call('DEL', stamps)
    redis.call('ZREM', leases, client)
  end
  if dropped > 0 then
    redis.call('HINCRBY', stats, 'watches', -dropped)
  end
  return dropped
end

-- The version of an expiry at `now` of a key whose version was `stored`, in the bucket whose
-- stats hash is `stats`: after both and after the newest version the bucket issued (with the
-- node of the key's last writer), recorded as the newest, so a SET that follows it gets a
-- later one.
local function expiry_version(stats, stored, now)
  local _, _, node = hlc_split(stored)
  local version = version_after(now, 0, node, {stored, redis.call('HGET', stats, 'newest')})
  redis.call('HSET', stats, 'newest', version)
  return version
end

-- Key scripts: KEYS = k:<key>, w:<key>, keys, exp, stats; ARGV[1] = the key, ARGV[2] = now.
-- If the key's deadline has passed, removes it and returns {the expiry's version, watchers...}
-- (its watchers get one DELETE notification: only the script that removes the key returns
-- it); otherwise false.
local function expire_if_due()
  local deadline = redis.call('HGET', KEYS[1], 'x')
  if not deadline or tonumber(deadline) > tonumber(ARGV[2]) then
    return false
  end
  local found = redis.call('HMGET', KEYS[1], 'v', 's')
  remove_key(KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[1], found[1])
  return append_members({expiry_version(KEYS[5], found[2], ARGV[2]), found[2]}, KEYS[2])
end

-- The fencing rule: false when `presented` ('' for none) may change a key fenced by `token`.
local function fencing_error(token, presented)
  if not token then return false end
  if presented == '' then return 'FencingTokenRequired' end
  if hlc_less(presented, token) then return 'FencingTokenLowerVersion' end
  return false
end
