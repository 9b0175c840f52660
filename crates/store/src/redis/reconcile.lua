-- reconcile: record sessions a node admitted on its own during drain mode.
-- KEYS: 1 queue, 2 seen, 3 active, 4 held (every token and session)
-- ARGV: member, expiry (us), member, expiry, ...
-- Returns how many were newly recorded as active.
local n = 0
for i = 1, #ARGV, 2 do
  local m = ARGV[i]
  -- Until the expire sweep, a token or session is still there to respect.
  if redis.call('HEXISTS', KEYS[4], m) == 0 then
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZADD', KEYS[3], ARGV[i + 1], m)
    redis.call('HSET', KEYS[4], m, 's' .. exact_text(ARGV[i + 1]))
    n = n + 1
  end
end
return n
