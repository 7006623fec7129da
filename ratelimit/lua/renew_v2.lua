-- Extend the leases of many in-flight requests in one call.
-- KEYS      rule base keys of all requests, concatenated
-- ARGV      lease ms, then per request: request id, "held;" per rule (in its KEYS order)
-- Reply     number of leases extended
-- An expired lease is not revived: it already stopped counting, so reviving it would count it again
-- after checks that did not see it.
local lease_ms = tonumber(ARGV[1])
local t = now_ms()
local ttl = 2 * lease_ms + 1000
local k, renewed = 1, 0
for a = 2, #ARGV, 2 do
  local id = ARGV[a]
  for held in string.gmatch(ARGV[a + 1], '(%d+);') do
    local base, member = KEYS[k], id .. '|' .. held
    k = k + 1
    if live_expiry(base, member, t) then
      redis.call('ZADD', base .. ':l', 'XX', t + lease_ms, member)
      redis.call('PEXPIRE', base .. ':l', ttl)
      renewed = renewed + 1
    end
  end
end
return renewed
