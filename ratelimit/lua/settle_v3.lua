-- Replace reservations by real usage at every rule and release their concurrency slots.
-- Many requests per call: the backend batches the settlements that arrive in one event-loop turn.
-- KEYS      rule base keys of all requests, concatenated
-- ARGV      sub-window ms, sub-windows, then per request: request id, number of its rules,
--           "kind,used,held;" per rule (in its KEYS order; held names the lease member "<id>|<held>")
-- Reply     number of (request, rule) pairs whose lease was still live (and so charged)
-- Usage is charged to the settlement's sub-window / period, and only if the lease is still live: an
-- expired lease already stopped counting, and charging it now could push a window past its limit.
-- Removing the lease first also makes a retried settle (after an ambiguous timeout) charge nothing twice.
local sub_ms, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = now_ms()
local cur = math.floor(t / sub_ms)
local charged = 0
local k = 1

local function settle_rule(base, member, held, kind, used)
  local live = live_expiry(base, member, t)
  unlease(base, member, held)
  if not live then return 0 end
  if used > 0 and kind == 'm' then
    local wk = base .. ':w:' .. cur
    redis.call('INCRBY', wk, used)
    -- Kept until it has left the window, plus one sub-window of slack.
    redis.call('PEXPIRE', wk, (cur + n + 1) * sub_ms - t)
  elseif used > 0 and (kind == 'd' or kind == 'M') then
    local pid, pend = period(kind, t)
    local qk = base .. ':q:' .. pid
    redis.call('INCRBY', qk, used)
    redis.call('PEXPIREAT', qk, pend + DAY_MS)
  end
  return 1
end

for a = 3, #ARGV, 3 do
  local id, count = ARGV[a], tonumber(ARGV[a + 1])
  local r = 0
  for kind, used, held in string.gmatch(ARGV[a + 2], '(%a),(%d+),(%d+);') do
    r = r + 1
    if r > count then break end
    charged = charged + settle_rule(KEYS[k], id .. '|' .. held, tonumber(held), kind, tonumber(used))
    k = k + 1
  end
end
return charged
