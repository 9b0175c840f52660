-- status: where a member stands at canonical TIME; optionally marks a waiter seen.
-- KEYS: 1 queue, 2 seen, 3 held, 4 active
-- ARGV: 1 member, 2 touch (0/1)
-- Returns {0, kind, a, b, text} like join.lua, kind 0 = not known.
local m = ARGV[1]

-- Polls are the hot path: ZRANK is the existence check, and TIME is only
-- read when the poll marks the waiter seen.
local rank = redis.call('ZRANK', KEYS[1], m)
if rank then
  if ARGV[2] == '1' then
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[2], t[1] * 1000000 + t[2], m)
  end
  return {0, 1, rank, redis.call('ZCARD', KEYS[1]), ''}
end
-- Tokens and sessions count until the expire sweep drops them, like a slot
-- they hold: admit counts them the same way, so the two always agree.
local v = redis.call('HGET', KEYS[3], m)
if v then return held_state(v, m, KEYS[4]) end
return {0, 0, 0, 0, ''}
