-- Grow a live reservation at every rule, all or nothing (streams reserve output tokens in chunks).
-- KEYS[i]   rule base key
-- ARGV      request id, lease ms, sub-window ms, sub-windows, purge batch,
--           rule specs "kind,limit,extra,shadow;" per rule in KEYS order
-- Reply     {1, server ms} granted; {0, server ms, i} refused by rule i; {0, server ms, 0} lease expired
-- The request's lease record grows by the extras and is renewed.
local id = ARGV[1]
local lease_ms, sub_ms, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = now_ms()
if #KEYS == 0 then return {1, t} end
local leases, lh = lease_keys(KEYS[1])
local expiry = tonumber(redis.call('ZSCORE', leases, id))
if not expiry or expiry <= t then return {0, t, 0} end
local cur = math.floor(t / sub_ms)
local kinds, limits, extras, shadows, offs = parse_specs(ARGV[6])
-- `used` includes what this request already holds, as at admission.
local checks, totals = situations(lh, KEYS, kinds, t, cur, n, offs)
for i = 1, #KEYS do
  if extras[i] > 0 and not shadows[i] and checks[i].used + extras[i] > limits[i] then return {0, t, i} end
end
local field = '@' .. id
local bases, amounts = parse_lease(redis.call('HGET', lh, field) or '')
local index = {}
for i = 1, #bases do index[bases[i]] = i end
for i = 1, #KEYS do
  if extras[i] > 0 then
    local j = index[KEYS[i]]
    if j == nil then
      bases[#bases + 1] = KEYS[i]
      amounts[#amounts + 1] = 0
      j = #bases
      index[KEYS[i]] = j
    end
    amounts[j] = amounts[j] + extras[i]
  end
end
local set = total_changes(lh, KEYS, extras, 1, totals)
set[#set + 1] = field
set[#set + 1] = format_lease(bases, amounts)
redis.call('HSET', lh, unpack(set))
redis.call('ZADD', leases, 'XX', t + lease_ms, id)
touch(leases, lh, lease_ms)
return {1, t}
