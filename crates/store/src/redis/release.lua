-- release: end a member's presence (waiting, admitted or active) and record
-- a revocation so every node stops honouring its pass.
-- KEYS: 1 queue, 2 seen, 3 held, 4 active, 5 revocations, 6 churn per second
-- ARGV: 1 member
-- Returns 1 if the member was present, else 0.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local m = ARGV[1]

-- `held` has every token and session; a token's batch entry may keep naming
-- the member until it expires, and the sweep skips members no longer holding it.
local n = redis.call('ZREM', KEYS[1], m) + redis.call('HDEL', KEYS[3], m)
redis.call('ZREM', KEYS[4], m)
if n == 0 then return 0 end
-- A join batch may still name the member: the mark says that word is stale
-- (see expire.lua); the idle sweep drops the mark later.
redis.call('ZADD', KEYS[2], now, m)
redis.call('ZADD', KEYS[5], now, m)
redis.call('HINCRBY', KEYS[6], string.format('%d', math.floor(now / 1000000)), 1)
return 1
