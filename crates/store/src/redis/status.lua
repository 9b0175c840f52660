-- status: where a member stands at canonical TIME; optionally marks a waiter seen.
-- KEYS: 1 queue, 2 seen, 3 active session ends, 4 tokens
-- ARGV: 1 member, 2 touch (0/1)
-- Returns {0, kind, a, b, text} like join.lua, kind 0 = not known.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m = ARGV[1]

if redis.call('ZSCORE', KEYS[1], m) then
  if ARGV[2] == '1' then redis.call('ZADD', KEYS[2], now, m) end
  return {0, 1, redis.call('ZRANK', KEYS[1], m), redis.call('ZCARD', KEYS[1]), ''}
end
-- Tokens and sessions count until the expire sweep drops them, like a slot
-- they hold: admit counts them the same way, so the two always agree.
local token = redis.call('HGET', KEYS[4], m)
if token then return {0, 2, 0, 0, token} end
local ends = redis.call('HGET', KEYS[3], m)
if ends then return {0, 3, 0, 0, ends} end
return {0, 0, 0, 0, ''}
