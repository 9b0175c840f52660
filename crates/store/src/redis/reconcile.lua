-- reconcile: record sessions a node admitted on its own during drain mode.
-- KEYS: 1 queue, 2 seen, 3 token expiries, 4 active, 5 active ends
-- ARGV: member, expiry (us), member, expiry, ...
-- Returns how many were newly recorded as active.
local n = 0
for i = 1, #ARGV, 2 do
  local m = ARGV[i]
  -- Until the expire sweep, a token or session is still there to respect.
  local busy = redis.call('ZSCORE', KEYS[4], m) or redis.call('ZSCORE', KEYS[3], m)
  if not busy then
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZADD', KEYS[4], ARGV[i + 1], m)
    redis.call('HSET', KEYS[5], m, ARGV[i + 1])
    n = n + 1
  end
end
return n
