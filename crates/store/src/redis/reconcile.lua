-- reconcile: record sessions a node admitted on its own during drain mode.
-- KEYS: 1 queue, 2 seen, 3 token expiries, 4 active
-- ARGV: member, expiry (us), member, expiry, ...
-- Returns how many were newly recorded as active.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = 0
for i = 1, #ARGV, 2 do
  local m = ARGV[i]
  local act = redis.call('ZSCORE', KEYS[4], m)
  local texp = redis.call('ZSCORE', KEYS[3], m)
  local busy = (act and tonumber(act) > now) or (texp and tonumber(texp) > now)
  if not busy then
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZADD', KEYS[4], ARGV[i + 1], m)
    n = n + 1
  end
end
return n
