-- extend: move an active session's end later (a session counts as active until
-- the expire sweep drops it).
-- KEYS: 1 active, 2 held   ARGV: 1 member, 2 new expiry (us)
-- Never earlier: renewals from several requests or nodes land in any order.
-- Returns 1 if the session is there (moved, or already ending later), else 0.
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 's' then return 0 end
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if current and tonumber(current) >= tonumber(ARGV[2]) then return 1 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local entry = 's' .. exact_text(ARGV[2])
if entry ~= v then redis.call('HSET', KEYS[2], ARGV[1], entry) end
return 1
