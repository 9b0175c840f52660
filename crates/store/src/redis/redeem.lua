-- redeem: consume a member's outstanding token and open its active session.
-- KEYS: 1 tokens, 2 token expiries, 3 used nonces, 4 active, 5 active ends, 6 totals
-- ARGV: 1 member, 2 nonce, 3 session expiry (us)
-- Returns 0 redeemed, 1 already used, 2 not admitted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local m, nonce = ARGV[1], ARGV[2]

if redis.call('ZSCORE', KEYS[3], nonce) then return 1 end
-- A token is the 16-byte nonce followed by its decimal expiry.
local token = redis.call('HGET', KEYS[1], m)
if not token or string.sub(token, 1, 16) ~= nonce then return 2 end
local texp = string.sub(token, 17)
if tonumber(texp) <= now then return 2 end

redis.call('HDEL', KEYS[1], m)
redis.call('ZREM', KEYS[2], m)
-- The used mark lives as long as the token could have: after that the token
-- itself is expired and refused anyway.
redis.call('ZADD', KEYS[3], texp, nonce)
redis.call('ZADD', KEYS[4], ARGV[3], m)
redis.call('HSET', KEYS[5], m, ARGV[3])
redis.call('HINCRBY', KEYS[6], 'redeemed', 1)
return 0
