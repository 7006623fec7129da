-- Grow a live reservation at every rule, all or nothing (streams reserve output tokens in chunks).
-- KEYS[i]   rule base key
-- ARGV      request id, lease ms, sub-window ms, sub-windows, purge batch,
--           rule specs "kind,limit,extra,shadow,held;" per rule in KEYS order
-- Reply     {1, server ms} granted; {0, server ms, i} refused by rule i; {0, server ms, 0} lease expired
-- The lease member "<id>|<held>" is replaced by "<id>|<held + extra>" (same expiry, renewed).
local id = ARGV[1]
local lease_ms, sub_ms, n, batch = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = now_ms()
local cur = math.floor(t / sub_ms)
local kinds, limits, extras, shadows, helds = parse_specs(ARGV[6])
for i = 1, #KEYS do
  if not live_expiry(KEYS[i], id .. '|' .. helds[i], t) then return {0, t, 0} end
end
for i = 1, #KEYS do
  if extras[i] > 0 and not shadows[i] then
    local c = check(KEYS[i], kinds[i], t, cur, n, batch)
    if c.used + extras[i] > limits[i] then return {0, t, i} end
  end
end
local ttl = 2 * lease_ms + 1000
for i = 1, #KEYS do
  unlease(KEYS[i], id .. '|' .. helds[i], helds[i])
  lease(KEYS[i], id .. '|' .. (helds[i] + extras[i]), helds[i] + extras[i], t + lease_ms, ttl)
end
return {1, t}
