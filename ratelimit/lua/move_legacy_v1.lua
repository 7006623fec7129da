-- Move one settled counter from its pre-0.3 name ({P}:...) to its name under the root (P:{P}:...).
-- KEYS[1] old name, KEYS[2] new name (the same hash tag, so the same slot); ARGV[1] kind: 'q' (quota
-- counter, STRING) or 'sw' (minute window, HASH; layout in lib_v4.lua), ARGV[2] n (sub-windows per
-- window). Adds to what the new name already holds (a replica of the new version may have settled
-- there first), keeps the longer TTL, deletes the old name. Returns 1 if something moved, else 0.
local old, new, kind, n = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', old) == 0 then return 0 end
local ttl = math.max(redis.call('PTTL', old), redis.call('PTTL', new))
if kind == 'q' then
  redis.call('INCRBY', new, tonumber(redis.call('GET', old)) or 0)
else
  local fields = redis.call('HGETALL', old)
  local h = tonumber(redis.call('HGET', new, 'h'))
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == 'h' then
      local oh = tonumber(fields[i + 1])
      if h == nil or (oh ~= nil and oh > h) then h = oh end
    elseif f ~= 't' then
      redis.call('HINCRBY', new, f, tonumber(fields[i + 1]) or 0)
    end
  end
  -- Keep lib_v4's invariant: every sub-window field lies in (h - n, h] and t is their sum.
  local t = 0
  local merged = redis.call('HGETALL', new)
  for i = 1, #merged, 2 do
    local sub = tonumber(merged[i])
    if sub ~= nil then
      if h ~= nil and sub <= h - n then
        redis.call('HDEL', new, merged[i])
      else
        t = t + (tonumber(merged[i + 1]) or 0)
      end
    end
  end
  if h == nil then
    redis.call('DEL', new)
  else
    redis.call('HSET', new, 't', t, 'h', h)
  end
end
redis.call('DEL', old)
if ttl > 0 and redis.call('EXISTS', new) == 1 then redis.call('PEXPIRE', new, ttl) end
return 1
