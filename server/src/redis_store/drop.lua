-- A client is gone: drop its registrations in this bucket. KEYS = c:<client>, leases,
-- stats; ARGV[1] client, [2] the bucket's `w:` prefix. Returns how many there were.
return drop_client(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1])
