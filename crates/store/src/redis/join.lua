-- join: insert-if-absent into the waiting queue, scored at canonical TIME.
-- KEYS: 1 queue, 2 seen, 3 active session ends, 4 tokens
-- ARGV: 1 member, 2 opens_at_us, 3 prewindow_score, 4 tiebreak, 5 behind (0/1)
-- Returns {new, kind, a, b, text}: kind 1 waiting (a = rank, b = length),
-- 2 admitted (text = the token: 16-byte nonce then decimal expiry),
-- 3 active (text = decimal session end). Times travel as text because
-- Lua's doubles cannot carry every i64 exactly.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m = ARGV[1]

-- A refresh of a waiting member is the hot path: check the queue first.
if redis.call('ZSCORE', KEYS[1], m) then
  redis.call('ZADD', KEYS[2], now, m)
  return {0, 1, redis.call('ZRANK', KEYS[1], m), redis.call('ZCARD', KEYS[1]), ''}
end

-- A join never demotes a member who already left the queue. Tokens and
-- sessions count until the expire sweep drops them, exactly as admit counts
-- the slots they hold, so the two always agree.
local token = redis.call('HGET', KEYS[4], m)
if token then return {0, 2, 0, 0, token} end
local ends = redis.call('HGET', KEYS[3], m)
if ends then return {0, 3, 0, 0, ends} end

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
redis.call('ZADD', KEYS[2], now, m)
return {added, 1, redis.call('ZRANK', KEYS[1], m), redis.call('ZCARD', KEYS[1]), ''}
