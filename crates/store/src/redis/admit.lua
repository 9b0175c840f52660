-- admit: release the best-ranked waiters with one outstanding token each.
-- KEYS: 1 queue, 2 held, 3 token batches, 4 token batch members,
--       5 admin state, 6 totals, 7 admissions per second,
--       8 the nodes' holds (only when admitting as one of several nodes)
-- ARGV: 1 max, 2 max_active, 3 token lifetime (us), 4 the admitting node's id
--       ('' when alone), 5.. one `held` token entry per admission
--       ('t' .. nonce, tagged by the caller)
-- Returns the admitted members, best first; member i got ARGV[4 + i].
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]

local max_active = tonumber(ARGV[2])
if KEYS[8] then
  -- One of several nodes: the admission stays out of the other nodes'
  -- holds, and comes out of this node's own reserve, which it gives up
  -- (its next renewal holds one again). In the same step as the pop, so no
  -- hold of slots about to be taken is needed, and none outlives them.
  max_active = max_active - other_holds(KEYS[8], ARGV[4], now)
  redis.call('HDEL', KEYS[8], ARGV[4])
end

local st = redis.call('GET', KEYS[5])
if st == 'paused' or st == 'closed' then return {} end

-- Every outstanding token and every active session has exactly one `held`
-- entry until the expire sweep (or redeem, release) drops it: the slot count
-- is the size of that hash, so no counter can drift.
local used = redis.call('HLEN', KEYS[2])
local n = math.min(tonumber(ARGV[1]), max_active - used, #ARGV - 4)
if n <= 0 then return {} end

-- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: the scores are not needed,
-- and formatting and parsing them is a large part of a pop's cost.
local members = redis.call('ZRANGE', KEYS[1], 0, n - 1)
if #members == 0 then return members end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)

-- The tokens of one chunk share their expiry, so the sweep finds them through
-- one entry per chunk (a batch id scored by the expiry, and the chunk's
-- members packed under that id) instead of one sorted-set entry per member,
-- which cost more than everything else here together. Each `held` entry
-- carries its own expiry, so redeem and status need no other lookup, and
-- the sweep drops a member only if its entry is still a token that expired.
-- Chunks keep `unpack` well inside Lua's stack limit (~8000 values).
-- Stamped here, from the clock of the pop: the caller's clock read is a
-- round trip or more older, and with several nodes that would let a later
-- pop carry an earlier issue time than the ranks before it.
local exp = string.format('%d', now + tonumber(ARGV[3]))
local CHUNK = 1000
for first = 1, #members, CHUNK do
  local last = math.min(first + CHUNK - 1, #members)
  local held = {}
  local j = 1
  for i = first, last do
    held[j] = members[i]
    held[j + 1] = ARGV[4 + i] .. exp
    j = j + 2
  end
  redis.call('HSET', KEYS[2], unpack(held))
  -- No `seen` work: while a member holds a slot, a join cannot put it back
  -- in the queue, so its old `seen` mark (if any) has no say; the sweep drops
  -- it, and leaving the slot writes a fresh mark (see expire.lua).
  -- Only a name for the batch, unique within the event; no slot accounting
  -- depends on it.
  local id = redis.call('HINCRBY', KEYS[6], 'token_batches', 1)
  redis.call('ZADD', KEYS[3], exp, id)
  redis.call('HSET', KEYS[4], id, cmsgpack.pack({unpack(members, first, last)}))
end

redis.call('HINCRBY', KEYS[6], 'admitted', #members)
redis.call('HINCRBY', KEYS[7], string.format('%d', math.floor(now / 1000000)), #members)
return members
