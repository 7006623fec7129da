-- Merge a batch of key-store entries from the pre-0.3 hashes ({P}:keys, {P}:keyids) into the ones
-- under the root (P:{P}:keys, P:{P}:keyids), deleting each merged field from the old hash.
-- KEYS: old records, new records, old ids, new ids (one hash tag, one slot).
-- ARGV: 'r' followed by record hashes (sha256) or 'i' followed by key ids.
-- A record the new hash lacks is copied; one it has is replaced only when the old one is revoked and
-- the new one is not (a revocation made on a replica of the old version during a rolling upgrade
-- must win). An id is copied when missing. Returns how many fields were written.
local written = 0
local records = ARGV[1] == 'r'
for i = 2, #ARGV do
  local field = ARGV[i]
  if records then
    local old = redis.call('HGET', KEYS[1], field)
    if old then
      local cur = redis.call('HGET', KEYS[2], field)
      local take = not cur
      if cur then
        local o, c = cjson.decode(old), cjson.decode(cur)
        take = o.revoked_at ~= nil and o.revoked_at ~= cjson.null
          and (c.revoked_at == nil or c.revoked_at == cjson.null)
      end
      if take then
        redis.call('HSET', KEYS[2], field, old)
        written = written + 1
      end
      redis.call('HDEL', KEYS[1], field)
    end
  else
    local sha = redis.call('HGET', KEYS[3], field)
    if sha then
      written = written + redis.call('HSETNX', KEYS[4], field, sha)
      redis.call('HDEL', KEYS[3], field)
    end
  end
end
return written
