-- Create a key record: checks and writes both hashes in one step, so two replicas creating the same
-- id cannot both win. KEYS: records (sha256 -> JSON), ids (key id -> sha256); ARGV: id, sha256, JSON.
-- Returns 0 created, 1 the id exists, 2 the hash exists.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 1 end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return 2 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 0
