-- join: insert-if-absent into the waiting queue, scored at canonical TIME,
-- for a batch of members (the joins that were waiting for the same event
-- when the batch left the gateway node; one member when the node is quiet).
-- The batch is one atomic step and every member in it is handled exactly as
-- if its own join had run alone at this TIME, in argument order: a member
-- named twice is new only the first time.
-- KEYS: 1 queue, 2 seen, 3 held, 4 active, 5 join batches, 6 join batch
--       members, 7 the sending node's batch order (one key per batch driver)
-- ARGV: 1 this batch's sequence number in its driver, 2 the number of the
--       batch that must have run first (0: none), then per member, 5 values:
--       member, opens_at_us, prewindow_score, tiebreak, behind (0/1)
-- Returns {-1} without changing anything if the batch named in ARGV[2] has
-- not run yet (this one overtook it on the way; the driver sends it again
-- once that one is answered), else
-- {queue length, then per member: code, value}: code 1 waiting
-- (value = rank), 2 waiting and new (value = rank), 3 admitted (value = the
-- token: 16-byte nonce then decimal expiry), 4 active (value = decimal
-- session end). Ranks and the length are read after the whole batch, as an
-- immediate status call would see them. Times travel as text because Lua's
-- doubles cannot carry every i64 exactly.
--
-- Why a batch: most of a lone join's cost in Redis is per call (EVALSHA,
-- its keys and arguments, TIME, one command each for the existence check,
-- the seen mark and the length), not per member; here those are paid once
-- per batch and only the rank is read member by member.
--
-- When a waiter was last seen: a member inserted by this batch is seen at
-- the batch's TIME, and that is recorded once for the batch (join batches:
-- id scored by TIME; join batch members: the ids' packed member lists), not
-- as one `seen` entry per member, which cost a third of a join. `seen` holds
-- the later sightings (polls, refreshing joins) and a mark for every member
-- that left a slot or the queue since a batch may have named it, so the
-- sweep knows a batch's word on a member is current only while the member
-- has no `seen` entry (see expire.lua).
--
-- Arrival order inside a batch and between a node's batches: the members of
-- one batch share its TIME, so each gets the batch's own order in the high
-- bits of its tie-break (anteroom_core::score::batch_tiebreak); a driver's
-- batches run in the order it formed them (the check on ARGV[2]) and each
-- runs at least a microsecond after the one before (KEYS[7] keeps the last
-- batch's instant), so a later batch never sorts before an earlier one.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local seq, after = tonumber(ARGV[1]), tonumber(ARGV[2])
local order = redis.call('GET', KEYS[7])
if order then
  local last_seq, last_now = string.match(order, '^(%d+):(%d+)$')
  if after > tonumber(last_seq) then return {-1} end
  if now <= tonumber(last_now) then now = tonumber(last_now) + 1 end
elseif after > 0 then
  return {-1}
end
-- Kept a little longer than a driver lives without a call.
redis.call('SET', KEYS[7], string.format('%d:%d', seq, now), 'PX', 600000)
local q, seen, held = KEYS[1], KEYS[2], KEYS[3]
local n = (#ARGV - 2) / 5

-- Mirror of anteroom_core::score::batch_tiebreak: n is at most 256, so the
-- span is a power of two of at least 4 and the arithmetic is exact.
local width = 1
while width < n do width = width * 2 end
local span = 1024 / width

-- Mirror of anteroom_core::score::arrival_score. Every value is an integer
-- below 2^53, so Lua's doubles compute it exactly; a product beyond 2^52
-- (a gap of 2^42 us or more) is clamped, so its rounding never matters.
local members, scores = {}, {}
for i = 1, n do
  local b = 2 + (i - 1) * 5
  local opens = tonumber(ARGV[b + 2])
  local score
  if now < opens then
    score = tonumber(ARGV[b + 3])
  else
    local tiebreak = (i - 1) * span + tonumber(ARGV[b + 4]) % span
    score = (now - opens) * 1024 + tiebreak
    if score > 4503599627370495 then score = 4503599627370495 end
  end
  if ARGV[b + 5] == '1' then score = score + 4503599627370496 end
  members[i] = ARGV[b + 1]
  scores[i] = score
end

-- Members not waiting yet, first mention only: the candidates to insert.
local present = redis.call('ZMSCORE', q, unpack(members))
local first, absent = {}, {}
for i = 1, n do
  local m = members[i]
  if not present[i] and not first[m] then
    first[m] = i
    absent[#absent + 1] = m
  end
end

-- A join never demotes a member who already left the queue. Tokens and
-- sessions count until the expire sweep drops them, exactly as admit counts
-- the slots they hold, so the two always agree.
local holding = {}
if #absent > 0 then
  local v = redis.call('HMGET', held, unpack(absent))
  for j = 1, #absent do
    if v[j] then holding[absent[j]] = v[j] end
  end
end

local add, inserted, marks = {}, {}, {}
for i = 1, n do
  local m = members[i]
  if not holding[m] then
    if first[m] == i then
      add[#add + 1] = scores[i]
      add[#add + 1] = m
      inserted[#inserted + 1] = m
    elseif present[i] then
      -- A refresh: the member was already waiting, seen again now.
      marks[#marks + 1] = now
      marks[#marks + 1] = m
    end
  end
end
if #add > 0 then
  redis.call('ZADD', q, 'NX', unpack(add))
  -- A newcomer with a `seen` mark (it left since an older batch named it)
  -- gets its mark moved to now; the others are seen through this batch.
  local marked = redis.call('ZMSCORE', seen, unpack(inserted))
  local fresh = {}
  for j = 1, #inserted do
    if marked[j] then
      marks[#marks + 1] = now
      marks[#marks + 1] = inserted[j]
    else
      fresh[#fresh + 1] = inserted[j]
    end
  end
  if #fresh > 0 then
    local id = redis.call('HINCRBY', KEYS[6], 'next', 1)
    redis.call('ZADD', KEYS[5], now, id)
    redis.call('HSET', KEYS[6], id, cmsgpack.pack(fresh))
  end
end
if #marks > 0 then redis.call('ZADD', seen, unpack(marks)) end

local out = {redis.call('ZCARD', q)}
for i = 1, n do
  local m = members[i]
  local v = holding[m]
  if v then
    local st = held_state(v, m, KEYS[4])
    out[#out + 1] = st[2] + 1
    out[#out + 1] = st[5]
  else
    out[#out + 1] = (first[m] == i) and 2 or 1
    out[#out + 1] = redis.call('ZRANK', q, m)
  end
end
return out
