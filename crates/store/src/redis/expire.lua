-- expire: drop idle waiters, unredeemed tokens and ended sessions at canonical
-- TIME, at most ARGV[2] of each per call so one sweep never blocks Redis for
-- long (the caller repeats while a category comes back full).
-- KEYS: 1 queue, 2 seen, 3 held, 4 token batches, 5 token batch members,
--       6 active, 7 used nonces, 8 revocations, 9 admissions/s, 10 churn/s,
--       11 no-shows/s
-- ARGV: 1 waiting members not seen since this time (us) lose their place,
--       2 limit per category, 3 revocation retention (us), 4 limit of token
--       batches (each at most 1000 members, see admit.lua)
-- Returns {idle waiters, expired tokens, ended sessions, 1 if token batches
-- were left for the next call else 0}.
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

-- Tokens expire by admit batch. A batch names the members it admitted; one
-- of them counts as an expired token only if its `held` entry is still a
-- token and that token has expired (it may have been redeemed, released,
-- or admitted again by a later batch since).
local batch_limit = tonumber(ARGV[4])
local batches = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', upto, 'LIMIT', 0, batch_limit)
local tokens = 0
for _, id in ipairs(batches) do
  local packed = redis.call('HGET', KEYS[5], id)
  if packed then
    each_chunk(cmsgpack.unpack(packed), function(c)
      local entries = redis.call('HMGET', KEYS[3], unpack(c))
      local drop = {}
      for j, m in ipairs(c) do
        local v = entries[j]
        if v and string.sub(v, 1, 1) == 't' and tonumber(string.sub(v, 18)) <= now then
          drop[#drop + 1] = m
        end
      end
      if #drop > 0 then redis.call('HDEL', KEYS[3], unpack(drop)) end
      tokens = tokens + #drop
    end)
  end
end
if #batches > 0 then
  redis.call('ZREM', KEYS[4], unpack(batches))
  redis.call('HDEL', KEYS[5], unpack(batches))
end

-- An ended session's pass must stop working on every node: revoke it.
local ses_list = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', upto, 'LIMIT', 0, limit)
each_chunk(ses_list, function(c)
  local revs = {}
  for _, m in ipairs(c) do
    revs[#revs + 1] = now
    revs[#revs + 1] = m
  end
  redis.call('ZADD', KEYS[8], unpack(revs))
  redis.call('ZREM', KEYS[6], unpack(c))
  redis.call('HDEL', KEYS[3], unpack(c))
end)

redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', upto)
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', string.format('(%d', now - tonumber(ARGV[3])))

-- Per-second histories feed the 1 and 5 minute rates in stats; older
-- buckets are of no use.
local sec = math.floor(now / 1000000)
local bucket = string.format('%d', sec)
if idle + #ses_list > 0 then redis.call('HINCRBY', KEYS[10], bucket, idle + #ses_list) end
if tokens > 0 then redis.call('HINCRBY', KEYS[11], bucket, tokens) end
for k = 9, 11 do
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[k])) do
    if tonumber(f) <= sec - 300 then old[#old + 1] = f end
  end
  each_chunk(old, function(c) redis.call('HDEL', KEYS[k], unpack(c)) end)
end
return {idle, tokens, #ses_list, (#batches >= batch_limit) and 1 or 0}
