-- Replace reservations by real usage at every rule and release their concurrency slots.
-- Many requests per call: the backend batches the settlements that arrive in one event-loop turn.
-- KEYS      rule base keys of all requests, concatenated
-- ARGV      sub-window ms, sub-windows, then per request: request id, number of its rules,
--           "kind,used;" per rule (in its KEYS order)
-- Reply     number of (request, rule) pairs whose lease was still live (and so charged)
-- Usage is charged to the settlement's sub-window / period, and only if the lease is still live: an
-- expired lease already stopped counting, and charging it now could push a window past its limit.
-- Dropping the lease record first also makes a retried settle (after an ambiguous timeout) charge
-- nothing twice.
local sub_ms, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = now_ms()
local cur = math.floor(t / sub_ms)
local charged = 0
local k = 1
local leases, lh

local function charge(base, kind, used)
  if used > 0 and kind == 'm' then
    local wk = base .. ':w'
    -- The first settle of a sub-window creates its field: the hash is then kept until that field has
    -- left the window (plus one sub-window of slack), and fields that already left it are dropped.
    if redis.call('HINCRBY', wk, cur, used) == used then
      redis.call('PEXPIRE', wk, (cur + n + 1) * sub_ms - t)
      if redis.call('HLEN', wk) > n then
        local all, stale = redis.call('HKEYS', wk), {}
        for i = 1, #all do
          if tonumber(all[i]) <= cur - n then stale[#stale + 1] = all[i] end
        end
        if #stale > 0 then redis.call('HDEL', wk, unpack(stale)) end
      end
    end
  elseif used > 0 and (kind == 'd' or kind == 'M') then
    local pid, pend = period(kind, t)
    local qk = base .. ':q:' .. pid
    if redis.call('INCRBY', qk, used) == used then redis.call('PEXPIREAT', qk, pend + DAY_MS) end
  end
end

for a = 3, #ARGV, 3 do
  local id, count = ARGV[a], tonumber(ARGV[a + 1])
  local live = false
  if count > 0 then
    if leases == nil then leases, lh = lease_keys(KEYS[k]) end
    local expiry = drop_lease(leases, lh, id)
    live = expiry ~= nil and expiry > t
  end
  local r = 0
  for kind, used in string.gmatch(ARGV[a + 2], '(%a),(%d+);') do
    r = r + 1
    if r > count then break end
    if live then
      charge(KEYS[k], kind, tonumber(used))
      charged = charged + 1
    end
    k = k + 1
  end
end
return charged
