-- expire: drop idle waiters, unredeemed tokens and ended sessions at canonical
-- TIME, at most ARGV[2] of each per call so one sweep never blocks Redis for
-- long (the caller repeats while a category comes back full).
-- KEYS: 1 queue, 2 seen, 3 held, 4 token batches, 5 token batch members,
--       6 active, 7 used nonces, 8 revocations, 9 admissions/s, 10 churn/s,
--       11 no-shows/s, 12 join batches, 13 join batch members
-- ARGV: 1 waiting members not seen since this time (us) lose their place,
--       2 limit per category, 3 revocation retention (us), 4 limit of token
--       batches (each at most 1000 members, see admit.lua), 5 limit of join
--       batches (each at most a few hundred members, see join.lua)
-- Returns {idle waiters, expired tokens, ended sessions, 1 if anything was
-- left for the next call else 0}.
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

-- When a waiter was last seen is the later of its join (recorded once per
-- join batch, see join.lua) and its `seen` mark, if it has one. Every
-- member that left the queue or a slot since a batch named it has a mark
-- (join, release and this sweep write them), so a batch's word on a member
-- is current exactly while the member has no mark. Hence the order: first
-- the batches older than the cutoff, whose unmarked members still waiting
-- are idle; then the marks older than the cutoff, but never past the oldest
-- batch left for the next call, so no mark goes while a batch naming its
-- member might remain.
local idle = 0
local more = 0
local join_limit = tonumber(ARGV[5])
local joins = redis.call('ZRANGEBYSCORE', KEYS[12], '-inf', '(' .. ARGV[1], 'LIMIT', 0, join_limit)
for _, id in ipairs(joins) do
  local packed = redis.call('HGET', KEYS[13], id)
  if packed then
    each_chunk(cmsgpack.unpack(packed), function(c)
      local marked = redis.call('ZMSCORE', KEYS[2], unpack(c))
      local unmarked = {}
      for j, m in ipairs(c) do
        if not marked[j] then unmarked[#unmarked + 1] = m end
      end
      if #unmarked > 0 then idle = idle + redis.call('ZREM', KEYS[1], unpack(unmarked)) end
    end)
  end
end
local seen_before = '(' .. ARGV[1]
if #joins > 0 then
  redis.call('ZREM', KEYS[12], unpack(joins))
  redis.call('HDEL', KEYS[13], unpack(joins))
  if #joins >= join_limit then
    local rest = redis.call('ZRANGE', KEYS[12], 0, 0, 'WITHSCORES')
    if rest[2] and tonumber(rest[2]) < tonumber(ARGV[1]) then
      seen_before = '(' .. rest[2]
      more = 1
    end
  end
end

local idle_list = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', seen_before, 'LIMIT', 0, limit)
if #idle_list >= limit then more = 1 end
each_chunk(idle_list, function(c)
  idle = idle + redis.call('ZREM', KEYS[1], unpack(c))
  redis.call('ZREM', KEYS[2], unpack(c))
end)

-- Members leaving a slot below get a `seen` mark at `now`: a join batch
-- may still name them (see above).
local function mark_left(c)
  local marks = {}
  for _, m in ipairs(c) do
    marks[#marks + 1] = now
    marks[#marks + 1] = m
  end
  redis.call('ZADD', KEYS[2], unpack(marks))
end

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
      if #drop > 0 then
        redis.call('HDEL', KEYS[3], unpack(drop))
        mark_left(drop)
      end
      tokens = tokens + #drop
    end)
  end
end
if #batches > 0 then
  redis.call('ZREM', KEYS[4], unpack(batches))
  redis.call('HDEL', KEYS[5], unpack(batches))
end
if #batches >= batch_limit then more = 1 end

-- An ended session's pass must stop working on every node: revoke it.
local ses_list = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', upto, 'LIMIT', 0, limit)
if #ses_list >= limit then more = 1 end
each_chunk(ses_list, function(c)
  local revs = {}
  for _, m in ipairs(c) do
    revs[#revs + 1] = now
    revs[#revs + 1] = m
  end
  redis.call('ZADD', KEYS[8], unpack(revs))
  redis.call('ZREM', KEYS[6], unpack(c))
  redis.call('HDEL', KEYS[3], unpack(c))
  mark_left(c)
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
return {idle, tokens, #ses_list, more}
