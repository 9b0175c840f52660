-- extend: move an active session's end (a session counts as active until
-- the expire sweep drops it).
-- KEYS: 1 active, 2 active ends   ARGV: 1 member, 2 new expiry (us)
-- Returns 1 if the session was there and moved, else 0.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return 1
end
return 0
