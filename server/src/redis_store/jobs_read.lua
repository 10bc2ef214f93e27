-- Reads a job: {revision} alone when it is the revision the caller has, else
-- {revision, JSON}; {} when there is no such job.
-- KEYS: job   ARGV: the revision the caller has (or -1)
local revision = redis.call('HGET', KEYS[1], 'r')
if not revision then return {} end
if tonumber(revision) == tonumber(ARGV[1]) then return {revision} end
return {revision, redis.call('HGET', KEYS[1], 'd')}
