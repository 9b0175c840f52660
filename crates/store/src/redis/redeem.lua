-- redeem: consume a member's outstanding token and open its active session.
-- KEYS: 1 held, 2 used nonces, 3 active, 4 totals, 5 admin state
-- ARGV: 1 member, 2 nonce, 3 session expiry (us), 4 '1' for a visitor's
--       redeem, which opens a session, '0' for a drain session a node took
--       over (open already, so whatever the admin state)
-- Returns {0, now} redeemed (now: this redeem's time, the session's start,
-- in us), {1} already used, {2} not admitted, {3} paused, {4} closed (the
-- token kept in both).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local m, nonce = ARGV[1], ARGV[2]

-- In the same step as the redeem: once a pause is stored, no node opens a
-- session, whatever admin state it last read.
if ARGV[4] ~= '0' then
  local st = redis.call('GET', KEYS[5])
  if st == 'paused' then return {3} end
  if st == 'closed' then return {4} end
end

if redis.call('ZSCORE', KEYS[2], nonce) then return {1} end
local v = redis.call('HGET', KEYS[1], m)
if not v or string.sub(v, 1, 1) ~= 't' or string.sub(v, 2, 17) ~= nonce then return {2} end
local texp = string.sub(v, 18)
if tonumber(texp) <= now then return {2} end

-- The token's batch entry stays until its expiry; the sweep then finds this
-- member's entry is a session, not that token, and leaves it alone.
-- The used mark lives as long as the token could have: after that the token
-- itself is expired and refused anyway.
redis.call('ZADD', KEYS[2], texp, nonce)
redis.call('ZADD', KEYS[3], ARGV[3], m)
redis.call('HSET', KEYS[1], m, 's' .. exact_text(ARGV[3]))
redis.call('HINCRBY', KEYS[4], 'redeemed', 1)
return {0, now}
