-- share: hold slots for one gateway node: its drain reserve and the
-- admissions it is about to make. Each hold is `reserve:pending:expiry_us`.
-- KEYS: 1 held (every token and session), 2 shares (node -> hold)
-- ARGV: node, max_active, reserve, pending, ttl_ms
-- Returns {reserve, pending, others}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local node = ARGV[1]
local ttl_ms = tonumber(ARGV[5])
local others = other_holds(KEYS[2], node, now)
if ttl_ms <= 0 then
  redis.call('HDEL', KEYS[2], node)
  return {0, 0, others}
end
local free = tonumber(ARGV[2]) - redis.call('HLEN', KEYS[1]) - others
if free < 0 then free = 0 end
local pending = math.min(tonumber(ARGV[4]), free)
local reserve = math.min(tonumber(ARGV[3]), free - pending)
redis.call('HSET', KEYS[2], node, string.format('%d:%d:%d', reserve, pending, now + ttl_ms * 1000))
-- The hash lives as long as its longest hold.
if redis.call('PTTL', KEYS[2]) < ttl_ms then
  redis.call('PEXPIRE', KEYS[2], ttl_ms)
end
return {reserve, pending, others}
