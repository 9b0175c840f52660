-- join: insert-if-absent into the waiting queue, scored at canonical TIME.
-- KEYS: 1 queue, 2 seen, 3 held, 4 token expiries, 5 active
-- ARGV: 1 member, 2 opens_at_us, 3 prewindow_score, 4 tiebreak, 5 behind (0/1)
-- Returns {new, kind, a, b, text}: kind 1 waiting (a = rank, b = length),
-- 2 admitted (text = the token: 16-byte nonce then decimal expiry),
-- 3 active (text = decimal session end). Times travel as text because
-- Lua's doubles cannot carry every i64 exactly.
--
-- Every redis.call costs about as much as a whole plain command, so the
-- common cases are kept short: a refresh is ZADD NX (which is the existence
-- check) + seen + rank; a new waiter adds one lookup in `held`.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local m = ARGV[1]

-- Mirror of anteroom_core::score::arrival_score. Every value is an integer
-- below 2^53, so Lua's doubles compute it exactly; a product beyond 2^52
-- (a gap of 2^42 us or more) is clamped, so its rounding never matters.
local opens = tonumber(ARGV[2])
local score
if now < opens then
  score = tonumber(ARGV[3])
else
  score = (now - opens) * 1024 + tonumber(ARGV[4])
  if score > 4503599627370495 then score = 4503599627370495 end
end
if ARGV[5] == '1' then score = score + 4503599627370496 end

local added = redis.call('ZADD', KEYS[1], 'NX', score, m)
if added == 1 then
  -- A join never demotes a member who already left the queue. Tokens and
  -- sessions count until the expire sweep drops them, exactly as admit
  -- counts the slots they hold, so the two always agree.
  local v = redis.call('HGET', KEYS[3], m)
  if v then
    redis.call('ZREM', KEYS[1], m)
    return held_state(v, m, KEYS[4], KEYS[5])
  end
end
redis.call('ZADD', KEYS[2], now, m)
return {added, 1, redis.call('ZRANK', KEYS[1], m), redis.call('ZCARD', KEYS[1]), ''}
