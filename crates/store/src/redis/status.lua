-- status: where a member stands at canonical TIME; optionally marks a waiter seen.
-- KEYS: 1 queue, 2 seen, 3 active, 4 tokens, 5 token expiries
-- ARGV: 1 member, 2 touch (0/1)
-- Returns {0, kind, a, b, nonce} like join.lua, kind 0 = not known.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m = ARGV[1]

if redis.call('ZSCORE', KEYS[1], m) then
  if ARGV[2] == '1' then redis.call('ZADD', KEYS[2], now, m) end
  return {0, 1, redis.call('ZRANK', KEYS[1], m), redis.call('ZCARD', KEYS[1]), ''}
end
local act = redis.call('ZSCORE', KEYS[3], m)
if act and tonumber(act) > now then
  return {0, 3, tonumber(act), 0, ''}
end
local texp = redis.call('ZSCORE', KEYS[5], m)
if texp and tonumber(texp) > now then
  return {0, 2, tonumber(texp), 0, redis.call('HGET', KEYS[4], m) or ''}
end
return {0, 0, 0, 0, ''}
