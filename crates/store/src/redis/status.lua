-- status: where each member of a batch of position polls stands; optionally
-- marks waiters seen. One member when the node is quiet (see batch.rs).
-- KEYS: 1 queue, 2 seen, 3 held, 4 active
-- ARGV: per member, 2 values: member, touch (0/1)
-- Returns {queue length, then per member: code, value}: code 0 not known,
-- 1 waiting (value = rank), 3 admitted (value = the token: 16-byte nonce
-- then decimal expiry), 4 active (value = decimal session end), as join.lua.
--
-- Polls are the hot path: ZRANK is the existence check, TIME is only read
-- when a poll marks a waiter seen, and the seen marks, the `held` lookups
-- and the queue length are one command each for the whole batch.
local q = KEYS[1]
local n = #ARGV / 2
local out = {0}
local touched, others, others_at = {}, {}, {}
for i = 1, n do
  local m = ARGV[2 * i - 1]
  local rank = redis.call('ZRANK', q, m)
  out[2 * i], out[2 * i + 1] = 0, 0
  if rank then
    out[2 * i], out[2 * i + 1] = 1, rank
    if ARGV[2 * i] == '1' then touched[#touched + 1] = m end
  else
    others[#others + 1] = m
    others_at[#others_at + 1] = i
  end
end
if #touched > 0 then
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local marks = {}
  for _, m in ipairs(touched) do
    marks[#marks + 1] = now
    marks[#marks + 1] = m
  end
  redis.call('ZADD', KEYS[2], unpack(marks))
end
-- Tokens and sessions count until the expire sweep drops them, like a slot
-- they hold: admit counts them the same way, so the two always agree.
if #others > 0 then
  local held = redis.call('HMGET', KEYS[3], unpack(others))
  for j = 1, #others do
    if held[j] then
      local st = held_state(held[j], others[j], KEYS[4])
      local i = others_at[j]
      out[2 * i], out[2 * i + 1] = st[2] + 1, st[5]
    end
  end
end
out[1] = redis.call('ZCARD', q)
return out
