-- A client is gone: drop its registrations in this bucket. KEYS = c:<client>, leases,
-- stats, r:<client>; ARGV[1] client, [2] the bucket's `w:` prefix, [3] a version or '': only
-- the registrations made before the change of that version (see drop_client). Returns how
-- many it dropped.
local before = ARGV[3] ~= '' and ARGV[3] or nil
return drop_client(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], ARGV[1], before)
