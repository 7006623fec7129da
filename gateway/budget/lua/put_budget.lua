-- Set or delete one run-time budget (the admin API), bump the version every replica polls, and return
-- what was there before (for the audit log), in one step.
-- KEYS: the budgets hash, the version counter (one hash tag, one slot).
-- ARGV: field ('<level> <name>'), JSON of the limits ('' deletes), the most fields the hash may hold.
-- Returns {previous JSON or '', new version}, or {-1} when the hash is full.
local before = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  if not before and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {-1} end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return {before or '', redis.call('INCR', KEYS[2])}
