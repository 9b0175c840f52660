-- extend: move a live active session's end.
-- KEYS: 1 active   ARGV: 1 member, 2 new expiry (us)
-- Returns 1 if the session was live and moved, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > now then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
  return 1
end
return 0
