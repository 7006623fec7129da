-- Shared prelude of the limiter scripts (prepended to each script before SCRIPT LOAD).
-- Mirrors ratelimit/windows.py; key scheme in ratelimit/keys.py. Times are server milliseconds.

local function now_ms()
  -- The Redis server clock, never the gateway's: every replica sees the same windows.
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Days since 1970-01-01 <-> UTC civil date (H. Hinnant's algorithms).
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

local function days_from_civil(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (m > 2 and m - 3 or m + 9) + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local DAY_MS = 86400000

-- (period id, period end ms) of quota kind 'd' (UTC day) or 'M' (UTC month) at time t.
local function period(kind, t)
  local days = math.floor(t / DAY_MS)
  if kind == 'd' then return 'd' .. days, (days + 1) * DAY_MS end
  local y, m = civil(days)
  local ny, nm = y, m + 1
  if nm == 13 then ny, nm = y + 1, 1 end
  return string.format('m%04d%02d', y, m), days_from_civil(ny, nm) * DAY_MS
end

-- Leases of a rule live in ONE sorted set `<base>:l`: members "<request id>|<amount>" scored by their
-- expiry (server ms, > 0), and a sentinel member '#' whose score is minus the total amount of those
-- members (expired ones included until purged). Carrying the amount in the member makes a lease one
-- ZADD + one ZINCRBY with no per-lease hash, and one key means one PEXPIRE keeps it all expiring.
local SUM = '#'

local function amount_of(member)
  return tonumber(string.match(member, '|(%d+)$')) or 0
end

local function leased_sum(lk)
  return -(tonumber(redis.call('ZSCORE', lk, SUM)) or 0)
end

-- Drop at most `batch` expired leases of a rule (bounded work per call: if more expired, they keep
-- counting until later calls purge them, which only errs on the safe side); return the live total.
local function live_leased(base, t, batch)
  local lk = base .. ':l'
  -- '(0': lease expiries are positive, the sentinel's score never is.
  local expired = redis.call('ZRANGEBYSCORE', lk, '(0', t, 'LIMIT', 0, batch)
  if #expired == 0 then return leased_sum(lk) end
  local drop = 0
  for i = 1, #expired do drop = drop + amount_of(expired[i]) end
  redis.call('ZREM', lk, unpack(expired))
  return -tonumber(redis.call('ZINCRBY', lk, drop, SUM))
end

local function earliest_lease(base)
  local first = redis.call('ZRANGEBYSCORE', base .. ':l', '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 then return nil end
  return tonumber(first[2])
end

-- Settled usage of the n sub-windows ending at `cur`, oldest first, and their sum.
local function window(base, cur, n)
  local keys = {}
  for k = 1, n do keys[k] = base .. ':w:' .. (cur - n + k) end
  local vals = redis.call('MGET', unpack(keys))
  local counts, total = {}, 0
  for k = 1, n do
    counts[k] = tonumber(vals[k]) or 0
    total = total + counts[k]
  end
  return counts, total
end

-- One rule's situation: used (this request excluded) and what Retry-After / headers need.
local function check(base, kind, t, cur, n, batch)
  local c = {kind = kind, leased = live_leased(base, t, batch), sum = 0, quota = 0, pend = 0}
  if kind == 'm' then
    c.counts, c.sum = window(base, cur, n)
  elseif kind == 'd' or kind == 'M' then
    local pid
    pid, c.pend = period(kind, t)
    c.quota = tonumber(redis.call('GET', base .. ':q:' .. pid)) or 0
  end
  c.used = c.leased + c.sum + c.quota
  return c
end

local function retry_ms(c, base, limit, cost, t, cur, n, sub_ms)
  if c.kind == 'c' then return 1000 end
  if c.kind ~= 'm' then return math.max(1, c.pend - t) end
  local need, freed = c.used + cost - limit, 0
  for k = 1, n do
    freed = freed + c.counts[k]
    if freed >= need then return math.max(1, (cur + k) * sub_ms - t) end
  end
  local first = earliest_lease(base)
  if first and cost <= limit then return math.max(1, first - t) end
  return n * sub_ms
end

-- (remaining, reset ms) after the decision; `charged` is the cost if admitted, else 0.
local function state(c, limit, charged, t, cur, n, sub_ms)
  local total = c.used + charged
  local remaining = math.max(0, limit - total)
  if c.kind == 'd' or c.kind == 'M' then return remaining, c.pend - t end
  if c.kind == 'c' or total == 0 then return remaining, 0 end
  local newest = cur
  if c.leased + charged == 0 then
    for k = n, 1, -1 do
      if c.counts[k] > 0 then newest = cur - n + k; break end
    end
  end
  return remaining, (newest + n) * sub_ms - t
end

-- `old`: what the request already holds at this rule (0 at admission: request ids are unique).
local function lease(base, member, amount, expiry, ttl)
  local lk = base .. ':l'
  redis.call('ZADD', lk, expiry, member)
  redis.call('ZINCRBY', lk, 0 - amount, SUM)  -- `0 - x`: Lua's -0 would reach Redis as "-0"
  -- Every lease expires within lease_ms of its last write, so this TTL outlives them all.
  redis.call('PEXPIRE', lk, ttl)
end

-- Remove a lease member; true when it was there (its amount leaves the total).
local function unlease(base, member, amount)
  local lk = base .. ':l'
  if redis.call('ZREM', lk, member) == 0 then return false end
  if amount ~= 0 then redis.call('ZINCRBY', lk, amount, SUM) end
  return true
end

-- Expiry of a lease member at a rule if still live at t, else nil.
local function live_expiry(base, member, t)
  local score = tonumber(redis.call('ZSCORE', base .. ':l', member))
  if score and score > t then return score end
  return nil
end

-- Rule specs packed by the client: "kind,limit,amount,shadow,held;" per rule (held: what the request
-- already holds at the rule, which names its lease member; 0 at admission).
local function parse_specs(spec)
  local kinds, limits, amounts, shadows, helds = {}, {}, {}, {}, {}
  for kind, limit, amount, shadow, held in string.gmatch(spec, '(%a),(%d+),(%d+),([01]),(%d+);') do
    kinds[#kinds + 1] = kind
    limits[#limits + 1] = tonumber(limit)
    amounts[#amounts + 1] = tonumber(amount)
    shadows[#shadows + 1] = shadow == '1'
    helds[#helds + 1] = tonumber(held)
  end
  return kinds, limits, amounts, shadows, helds
end
