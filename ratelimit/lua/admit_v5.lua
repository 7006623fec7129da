-- Admit one request at every rule, all or nothing, in one round trip; first settle the requests this
-- gateway finished since its last script call (carried here instead of costing a call of their own).
-- KEYS      the request's rule base keys (ratelimit/keys.py), then those of the carried settlements
--           not among them; the lease structures share their hash tag
-- ARGV      request id, lease ms, sub-window ms, sub-windows, purge batch,
--           rule specs "kind,limit,cost,shadow;" per rule in KEYS order (kind m|d|M|T|c, a quota kind with its zone's offset in minutes, e.g. d-300; shadow 0|1),
--           number of the request's keys, then the settlements as in settle_v5.lua.
--           One packed argument instead of four per rule: the client's per-argument cost dominated.
-- Reply     {allowed 0|1, server ms, refused rule index (1-based, 0 = none), retry ms,
--            then per rule: remaining, reset ms, shadow refused 0|1}
local id = ARGV[1]
local lease_ms, sub_ms, n, batch = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = now_ms()
local na = tonumber(ARGV[7])
if #KEYS == 0 then return {1, t, 0, 0} end
local leases, lh = lease_keys(KEYS[1])
if #ARGV > 7 then settle_from(leases, lh, 8, t, sub_ms, n) end
if na == 0 then return {1, t, 0, 0} end
local keys = KEYS
if #KEYS > na then
  keys = {}
  for i = 1, na do keys[i] = KEYS[i] end
end
local cur = math.floor(t / sub_ms)
local kinds, limits, costs, shadows, offs = parse_specs(ARGV[6])
purge(leases, lh, t, batch)
local checks, totals = situations(lh, keys, kinds, t, cur, n, offs)
local refused, refused_retry = 0, 0
for i = 1, #keys do
  local c = checks[i]
  c.fits = c.used + costs[i] <= limits[i]
  if not c.fits and not shadows[i] then
    -- Name the refusing rule that binds longest (ties: the first): Retry-After must cover it.
    local r = retry_ms(c, keys[i], limits[i], costs[i], t, cur, n, sub_ms)
    if r > refused_retry then refused, refused_retry = i, r end
  end
end
local allowed = refused == 0
if allowed then put_lease(leases, lh, id, keys, costs, t + lease_ms, lease_ms, totals) end
local reply = {allowed and 1 or 0, t, refused, refused_retry}
for i = 1, #keys do
  local remaining, reset = state(checks[i], limits[i], allowed and costs[i] or 0, t, cur, n, sub_ms)
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = (shadows[i] and not checks[i].fits) and 1 or 0
end
return reply
