-- Replace a reservation by real usage at every rule and release its concurrency slot.
-- KEYS[i]   rule base key
-- ARGV      request id, sub-window ms, sub-windows, then per rule: kind, used
-- Reply     number of rules whose lease was still live (and so charged)
-- Usage is charged to the settlement's sub-window / period, and only if the lease is still live: an
-- expired lease already stopped counting, and charging it now could push a window past its limit.
-- Dropping the lease first also makes a retried settle (after an ambiguous timeout) charge nothing twice.
local id = ARGV[1]
local sub_ms, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = now_ms()
local cur = math.floor(t / sub_ms)
local charged = 0
for i = 1, #KEYS do
  local base = KEYS[i]
  local kind, used = ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  local live = live_expiry(base, id, t)
  local held = redis.call('HGET', base .. ':a', 'r:' .. id)
  if held then
    redis.call('HDEL', base .. ':a', 'r:' .. id)
    -- `0 - x`, not `-x`: Lua's -0 would reach Redis as "-0", which HINCRBY rejects.
    redis.call('HINCRBY', base .. ':a', 'sum', 0 - tonumber(held))
  end
  redis.call('ZREM', base .. ':l', id)
  if live and held then
    charged = charged + 1
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
  end
end
return charged
