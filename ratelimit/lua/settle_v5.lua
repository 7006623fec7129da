-- Settle many requests in one call (those no admission carried: see admit_v5.lua).
-- KEYS      rule base keys of all requests, concatenated
-- ARGV      sub-window ms, sub-windows, then per request: request id, number of its rules,
--           "kind,used;" per rule (in its KEYS order)
-- Reply     number of (request, rule) pairs whose lease was still live (and so charged)
return settle_from(1, 3, now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2]))
