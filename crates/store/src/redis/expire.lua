-- expire: drop idle waiters, unredeemed tokens and ended sessions at canonical
-- TIME, at most ARGV[2] of each per call so one sweep never blocks Redis for
-- long (the caller repeats while a category comes back full).
-- KEYS: 1 queue, 2 seen, 3 held, 4 token expiries, 5 active, 6 used nonces,
--       7 revocations, 8 admissions/s, 9 churn/s, 10 no-shows/s
-- ARGV: 1 waiting members not seen since this time (us) lose their place,
--       2 limit per category, 3 revocation retention (us)
-- Returns {idle waiters, expired tokens, ended sessions}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[2])
local upto = string.format('%d', now)
local CHUNK = 1000

-- Calls cmd(key, prefix..., chunk of items...) over items in bounded chunks.
local function each_chunk(items, f)
  for first = 1, #items, CHUNK do
    f({unpack(items, first, math.min(first + CHUNK - 1, #items))})
  end
end

local idle_list = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, limit)
local idle = 0
each_chunk(idle_list, function(c)
  idle = idle + redis.call('ZREM', KEYS[1], unpack(c))
  redis.call('ZREM', KEYS[2], unpack(c))
end)

local tok_list = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', upto, 'LIMIT', 0, limit)
each_chunk(tok_list, function(c)
  redis.call('HDEL', KEYS[3], unpack(c))
  redis.call('ZREM', KEYS[4], unpack(c))
end)

-- An ended session's pass must stop working on every node: revoke it.
local ses_list = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', upto, 'LIMIT', 0, limit)
each_chunk(ses_list, function(c)
  local revs = {}
  for _, m in ipairs(c) do
    revs[#revs + 1] = now
    revs[#revs + 1] = m
  end
  redis.call('ZADD', KEYS[7], unpack(revs))
  redis.call('ZREM', KEYS[5], unpack(c))
  redis.call('HDEL', KEYS[3], unpack(c))
end)

redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', upto)
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', string.format('(%d', now - tonumber(ARGV[3])))

-- Per-second histories feed the 1 and 5 minute rates in stats; older
-- buckets are of no use.
local sec = math.floor(now / 1000000)
local bucket = string.format('%d', sec)
if idle + #ses_list > 0 then redis.call('HINCRBY', KEYS[9], bucket, idle + #ses_list) end
if #tok_list > 0 then redis.call('HINCRBY', KEYS[10], bucket, #tok_list) end
for k = 8, 10 do
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[k])) do
    if tonumber(f) <= sec - 300 then old[#old + 1] = f end
  end
  each_chunk(old, function(c) redis.call('HDEL', KEYS[k], unpack(c)) end)
end
return {idle, #tok_list, #ses_list}
