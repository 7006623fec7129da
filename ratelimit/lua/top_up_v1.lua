-- Grow a live reservation at every rule, all or nothing (streams reserve output tokens in chunks).
-- KEYS[i]   rule base key
-- ARGV      request id, lease ms, sub-window ms, sub-windows, purge batch,
--           then per rule: kind, effective limit, extra, shadow (0|1)
-- Reply     {1, server ms} granted; {0, server ms, i} refused by rule i; {0, server ms, 0} lease expired
local id = ARGV[1]
local lease_ms, sub_ms, n, batch = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = now_ms()
local cur = math.floor(t / sub_ms)
for i = 1, #KEYS do
  if not live_expiry(KEYS[i], id, t) then return {0, t, 0} end
end
for i = 1, #KEYS do
  local o = 5 + (i - 1) * 4
  local extra = tonumber(ARGV[o + 3])
  if extra > 0 and ARGV[o + 4] ~= '1' then
    local c = check(KEYS[i], ARGV[o + 1], t, cur, n, batch)
    if c.used + extra > tonumber(ARGV[o + 2]) then return {0, t, i} end
  end
end
local ttl = 2 * lease_ms + 1000
for i = 1, #KEYS do
  local o = 5 + (i - 1) * 4
  local held = tonumber(redis.call('HGET', KEYS[i] .. ':a', 'r:' .. id)) or 0
  lease(KEYS[i], id, held + tonumber(ARGV[o + 3]), t + lease_ms, ttl)
end
return {1, t}
