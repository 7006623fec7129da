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
local TOTAL_TTL_MS = 400 * DAY_MS  -- a lifetime budget's counter outlives 400 days without a charge only

-- (period id, period end ms) of quota kind 'd' (calendar day) or 'M' (calendar month) at time t, in
-- the zone `off` minutes east of UTC (the client passes the limits' zone's current offset; 0 = UTC);
-- kind 'T' (a total that never resets) has the one period 'all', end 0.
local function period(kind, t, off)
  if kind == 'T' then return 'all', 0 end
  local shift = (off or 0) * 60000
  local days = math.floor((t + shift) / DAY_MS)
  if kind == 'd' then return 'd' .. days, (days + 1) * DAY_MS - shift end
  local y, m = civil(days)
  local ny, nm = y, m + 1
  if nm == 13 then ny, nm = y + 1, 1 end
  return string.format('m%04d%02d', y, m), days_from_civil(ny, nm) * DAY_MS - shift
end

-- Leases (v4, unchanged in lib_v4): one record per request, not one per rule. Two keys under the shared root
-- `P:{P}` (taken from the first rule key up to its hash tag, so no extra argument and the same slot):
--   P:{P}:leases ZSET  request id -> lease expiry (server ms)
--   P:{P}:lh     HASH  '@' .. request id -> "<rule base key> <amount>\n" per rule it holds, and
--                      <rule base key>    -> total amount of the leases counted there (0: deleted)
-- An admission then costs a fixed handful of calls however many rules it spans (per-rule lease sets
-- cost three writes per rule and dominated the script's time). Expired leases keep counting until a
-- purge subtracts them, which only errs on the safe side; every admission purges a bounded batch
-- first. Both keys expire 2 x lease + 1 s after the last lease write: by then every lease in them has
-- expired, so they vanish together with nothing live lost.

-- (Scripts derive them once, from KEYS[1], and hand them to the functions below.)
local function lease_keys(base)
  local head = string.match(base, '^([^{]*{[^}]*})')
  return head .. ':leases', head .. ':lh'
end

local function touch(leases, lh, lease_ms)
  local ttl = 2 * lease_ms + 1000
  redis.call('PEXPIRE', leases, ttl)
  redis.call('PEXPIRE', lh, ttl)
end

-- Parse a stored lease spec into parallel lists of rule base keys and amounts.
local function parse_lease(spec)
  local bases, amounts = {}, {}
  for base, amount in string.gmatch(spec, '(%S+) (%d+)\n') do
    bases[#bases + 1] = base
    amounts[#amounts + 1] = tonumber(amount)
  end
  return bases, amounts
end

local function format_lease(bases, amounts)
  local parts = {}
  for i = 1, #bases do
    if amounts[i] ~= 0 then parts[#parts + 1] = bases[i] .. ' ' .. amounts[i] .. '\n' end
  end
  return table.concat(parts)
end

-- New rule totals after adding `sign * amounts`: HSET / HDEL argument lists (totals reaching 0 are
-- deleted, so the hash holds only rules with live leases). `known` maps base -> current total when the
-- caller has just read them; otherwise they are read here.
local function total_changes(lh, bases, amounts, sign, known)
  local uniq, delta = {}, {}
  for i = 1, #bases do
    local b = bases[i]
    if amounts[i] ~= 0 then
      if delta[b] == nil then
        uniq[#uniq + 1] = b
        delta[b] = 0
      end
      delta[b] = delta[b] + amounts[i]
    end
  end
  local set, del = {}, {}
  if #uniq == 0 then return set, del end
  local cur = {}
  if known == nil then
    local vals = redis.call('HMGET', lh, unpack(uniq))
    for i = 1, #uniq do cur[i] = tonumber(vals[i]) or 0 end
  else
    for i = 1, #uniq do cur[i] = known[uniq[i]] or 0 end
  end
  for i = 1, #uniq do
    local v = cur[i] + sign * delta[uniq[i]]
    if v > 0 then
      set[#set + 1] = uniq[i]
      set[#set + 1] = v
    else
      del[#del + 1] = uniq[i]
    end
  end
  return set, del
end

-- Drop one lease record; its amounts leave the rule totals. Returns its expiry (nil if it was gone).
local function drop_lease(leases, lh, id)
  local expiry = redis.call('ZSCORE', leases, id)
  if not expiry then return nil end
  redis.call('ZREM', leases, id)
  local field = '@' .. id
  local bases, amounts = parse_lease(redis.call('HGET', lh, field) or '')
  local set, del = total_changes(lh, bases, amounts, -1, nil)
  del[#del + 1] = field
  if #set > 0 then redis.call('HSET', lh, unpack(set)) end
  redis.call('HDEL', lh, unpack(del))
  return tonumber(expiry)
end

-- Purge at most `batch` expired leases (bounded work per call).
local function purge(leases, lh, t, batch)
  local head = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  if #head == 0 or tonumber(head[2]) > t then return end
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', t, 'LIMIT', 0, batch)
  for i = 1, #expired do drop_lease(leases, lh, expired[i]) end
end

-- Earliest expiry among the live leases that hold `base` (Retry-After for a rule full of leases).
-- Scans the oldest leases only, so it is bounded; nil when none of them holds the rule.
local function earliest_lease(base, t)
  local leases, lh = lease_keys(base)
  local head = redis.call('ZRANGEBYSCORE', leases, '(' .. t, '+inf', 'WITHSCORES', 'LIMIT', 0, 50)
  local needle = '\n' .. base .. ' '
  for i = 1, #head, 2 do
    local spec = redis.call('HGET', lh, '@' .. head[i]) or ''
    if string.find('\n' .. spec, needle, 1, true) then return tonumber(head[i + 1]) end
  end
  return nil
end

-- Write a new lease record (admission): `totals` are the rule totals just read by `situations`.
-- (One pass building the totals and the record: this runs on every admission, and Lua's table and
-- string work, not the Redis commands, is most of a script's time.)
local function put_lease(leases, lh, id, bases, amounts, expiry, lease_ms, totals)
  redis.call('ZADD', leases, expiry, id)
  local set, parts = {}, {}
  for i = 1, #bases do
    local a = amounts[i]
    if a ~= 0 then
      local b = bases[i]
      local v = totals[b] + a  -- amounts are >= 0; a base listed twice adds up (HSET keeps the last)
      totals[b] = v
      set[#set + 1] = b
      set[#set + 1] = v
      parts[#parts + 1] = b .. ' ' .. a .. '\n'
    end
  end
  set[#set + 1] = '@' .. id
  set[#set + 1] = table.concat(parts)
  redis.call('HSET', lh, unpack(set))
  touch(leases, lh, lease_ms)
end

-- Minute windows (lib_v4): HASH <base>:sw holds sub-window n (= floor(server ms / sub-window ms)) ->
-- settled usage, plus 't' = the sum of the sub-window fields present and 'h' = the newest sub-window
-- present. Every sub-window field present lies in (h - n, h]: the settle that opens a sub-window drops
-- the ones it pushes out. Reading the window at sub-window `cur` is then one HMGET of t and h (plus,
-- after a quiet spell, one of the cur - h fields that left since), not one of all n fields: the
-- admission's Lua time is on every request's critical path, multiplied by the requests queued behind it.
local function window_sum(wk, cur, n)
  local v = redis.call('HMGET', wk, 't', 'h')
  local h = tonumber(v[2])
  if h == nil or h <= cur - n then return 0, nil end
  local sum = tonumber(v[1]) or 0
  if cur > h then
    local gone = {}
    for j = h - n + 1, cur - n do gone[#gone + 1] = j end
    local vals = redis.call('HMGET', wk, unpack(gone))
    for j = 1, #vals do sum = sum - (tonumber(vals[j]) or 0) end
  end
  return sum, h
end

-- The n sub-window counters of the window ending at `cur`, oldest first (Retry-After of a refusal).
local function window_counts(wk, cur, n)
  local fields = {}
  for k = 1, n do fields[k] = cur - n + k end
  local vals = redis.call('HMGET', wk, unpack(fields))
  local counts = {}
  for k = 1, n do counts[k] = tonumber(vals[k]) or 0 end
  return counts
end

-- Add settled usage to sub-window `cur` (see window_sum for the layout it keeps).
local function window_add(wk, used, t, cur, n, sub_ms)
  if redis.call('HINCRBY', wk, cur, used) ~= used then
    redis.call('HINCRBY', wk, 't', used)  -- the newest sub-window, already open: the common case
    return
  end
  -- A sub-window field was created: normally a new newest one, which pushes old ones out.
  local h = tonumber(redis.call('HGET', wk, 'h'))
  if h ~= nil and cur < h then
    -- The server clock stepped back: keep the layout, charging the newest sub-window instead if this
    -- one is already outside the window (either way the usage counts at least as long as it should).
    if cur <= h - n then
      redis.call('HDEL', wk, cur)
      redis.call('HINCRBY', wk, h, used)
    end
    redis.call('HINCRBY', wk, 't', used)
    return
  end
  if h == nil or h <= cur - n then
    -- Nothing left in the window: start over (stale fields, if any, go with the old sum).
    redis.call('DEL', wk)
    redis.call('HSET', wk, cur, used, 't', used, 'h', cur)
  else
    local gone, left = {}, 0
    for j = h - n + 1, cur - n do gone[#gone + 1] = j end
    if #gone > 0 then
      local vals = redis.call('HMGET', wk, unpack(gone))
      for j = 1, #vals do left = left + (tonumber(vals[j]) or 0) end
      redis.call('HDEL', wk, unpack(gone))
    end
    redis.call('HINCRBY', wk, 't', used - left)
    redis.call('HSET', wk, 'h', cur)
  end
  -- Kept until its newest sub-window has left the window (plus one sub-window of slack).
  redis.call('PEXPIRE', wk, (cur + n + 1) * sub_ms - t)
end

-- The situation of every rule of a request: used (this request excluded) and what Retry-After and the
-- headers need: the leased totals (one HMGET for all rules), then per minute rule its window sum and
-- newest sub-window, per quota rule its period counter.
local function situations(lh, bases, kinds, t, cur, n, offs)
  local vals0 = redis.call('HMGET', lh, unpack(bases))
  local checks, totals = {}, {}
  for i = 1, #bases do
    local kind, leased = kinds[i], tonumber(vals0[i]) or 0
    local c = {kind = kind, leased = leased, sum = 0, quota = 0, pend = 0}
    totals[bases[i]] = leased
    if kind == 'm' then
      c.sum, c.newest = window_sum(bases[i] .. ':sw', cur, n)
    elseif kind == 'd' or kind == 'M' or kind == 'T' then
      local pid
      pid, c.pend = period(kind, t, offs[i])
      c.quota = tonumber(redis.call('GET', bases[i] .. ':q:' .. pid)) or 0
    end
    c.used = leased + c.sum + c.quota
    checks[i] = c
  end
  return checks, totals
end

local function retry_ms(c, base, limit, cost, t, cur, n, sub_ms)
  if c.kind == 'c' then return 1000 end
  if c.kind ~= 'm' then
    -- A quota: if what is settled leaves room, running requests settling below their reservations
    -- (a dollar budget reserves the worst price) will make it: soon, not at the period's end.
    if c.leased > 0 and c.used - c.leased + cost <= limit then return 1000 end
    if c.kind == 'T' then return DAY_MS end  -- never resets
    return math.max(1, c.pend - t)
  end
  local need, freed = c.used + cost - limit, 0
  local counts = window_counts(base .. ':sw', cur, n)
  for k = 1, n do
    freed = freed + counts[k]
    if freed >= need then return math.max(1, (cur + k) * sub_ms - t) end
  end
  local first = earliest_lease(base, t)
  if first and cost <= limit then return math.max(1, first - t) end
  return n * sub_ms
end

-- (remaining, reset ms) after the decision; `charged` is the cost if admitted, else 0.
local function state(c, limit, charged, t, cur, n, sub_ms)
  local total = c.used + charged
  local remaining = math.max(0, limit - total)
  if c.kind == 'd' or c.kind == 'M' then return remaining, c.pend - t end
  if c.kind == 'c' or c.kind == 'T' or total == 0 then return remaining, 0 end
  -- Only settled usage counts (total > 0): it leaves the window with its newest sub-window.
  local newest = cur
  if c.leased + charged == 0 and c.newest ~= nil then newest = c.newest end
  return remaining, (newest + n) * sub_ms - t
end

-- Rule specs packed by the client: "kind,limit,amount,shadow;" per rule, in KEYS order. A quota kind
-- may carry its zone's offset in minutes ("d-300"): its calendar is that zone's (see `period`).
local function parse_specs(spec)
  local kinds, limits, amounts, shadows, offs = {}, {}, {}, {}, {}
  for kind, off, limit, amount, shadow in string.gmatch(spec, '(%a)([%+%-]?%d*),(%d+),(%d+),([01]);') do
    kinds[#kinds + 1] = kind
    offs[#offs + 1] = tonumber(off) or 0
    limits[#limits + 1] = tonumber(limit)
    amounts[#amounts + 1] = tonumber(amount)
    shadows[#shadows + 1] = shadow == '1'
  end
  return kinds, limits, amounts, shadows, offs
end

-- Settlements (settle_v5, and admit_v5 carrying the ones that finished since the last call): replace
-- each reservation by its real usage and release its concurrency slots. Per request, from ARGV[a]:
-- request id, index in KEYS of its first rule key (requests with the same rules share keys), number
-- of its rules, "kind,used;" per rule (in its keys' order).
-- Usage is charged to the settlement's sub-window / period, and only if the lease is still live: an
-- expired lease already stopped counting, and charging it now could push a window past its limit.
-- Dropping the lease record first also makes a retried settle (after an ambiguous timeout) charge
-- nothing twice. Returns the number of (request, rule) pairs charged.
local function charge(base, kind, used, t, cur, n, sub_ms, off)
  if used > 0 and kind == 'm' then
    window_add(base .. ':sw', used, t, cur, n, sub_ms)
  elseif used > 0 and (kind == 'd' or kind == 'M') then
    local pid, pend = period(kind, t, off)
    local qk = base .. ':q:' .. pid
    if redis.call('INCRBY', qk, used) == used then redis.call('PEXPIREAT', qk, pend + DAY_MS) end
  elseif used > 0 and kind == 'T' then
    -- A total is kept while it is used: bounded by a TTL like every other key, renewed on each charge.
    local qk = base .. ':q:all'
    redis.call('INCRBY', qk, used)
    redis.call('PEXPIRE', qk, TOTAL_TTL_MS)
  end
end

local function settle_from(leases, lh, a, t, sub_ms, n)
  local cur = math.floor(t / sub_ms)
  local charged = 0
  for i = a, #ARGV, 4 do
    local id, k, count = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local live = false
    if count > 0 then
      local expiry = drop_lease(leases, lh, id)
      live = expiry ~= nil and expiry > t
    end
    if live then
      local r = 0
      for kind, off, used in string.gmatch(ARGV[i + 3], '(%a)([%+%-]?%d*),(%d+);') do
        if r >= count then break end
        charge(KEYS[k + r], kind, tonumber(used), t, cur, n, sub_ms, tonumber(off) or 0)
        r = r + 1
        charged = charged + 1
      end
    end
  end
  return charged
end
