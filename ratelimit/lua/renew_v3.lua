-- Extend the leases of many in-flight requests in one call.
-- KEYS      one rule base key (only its hash tag is used: the lease records live under it)
-- ARGV      lease ms, then the request ids
-- Reply     number of leases extended
-- An expired lease is not revived: it already stopped counting, so reviving it would count it again
-- after checks that did not see it.
local lease_ms = tonumber(ARGV[1])
local t = now_ms()
local leases, lh = lease_keys(KEYS[1])
local renewed = 0
for a = 2, #ARGV do
  local score = tonumber(redis.call('ZSCORE', leases, ARGV[a]))
  if score and score > t then
    redis.call('ZADD', leases, 'XX', t + lease_ms, ARGV[a])
    renewed = renewed + 1
  end
end
-- The keys must outlive the leases just extended.
if renewed > 0 then touch(leases, lh, lease_ms) end
return renewed
