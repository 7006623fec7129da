-- Settle many requests in one call (those no admission carried: see admit_v5.lua).
-- KEYS      rule base keys of the requests (each rule set once)
-- ARGV      sub-window ms, sub-windows, then per request: request id, index in KEYS of its first
--           rule key, number of its rules, "kind,used;" per rule (in its keys' order)
-- Reply     number of (request, rule) pairs whose lease was still live (and so charged)
if #KEYS == 0 then return 0 end
local leases, lh = lease_keys(KEYS[1])
return settle_from(leases, lh, 3, now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2]))
