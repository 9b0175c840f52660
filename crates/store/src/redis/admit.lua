-- admit: release the best-ranked waiters with one outstanding token each.
-- KEYS: 1 queue, 2 seen, 3 tokens, 4 token expiries, 5 active, 6 admin state,
--       7 totals, 8 admissions per second
-- ARGV: 1 max, 2 max_active, 3 token expiry (us), 4.. one nonce per admission
-- Returns the admitted members, best first; member i got nonce ARGV[3 + i].
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local st = redis.call('GET', KEYS[6])
if st == 'paused' or st == 'closed' then return {} end

-- Sessions and tokens hold their slot until the expire sweep drops them:
-- the slot count is the size of two sets, so no counter can drift.
local used = redis.call('ZCARD', KEYS[5]) + redis.call('ZCARD', KEYS[4])
local n = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used, #ARGV - 3)
if n <= 0 then return {} end

local popped = redis.call('ZPOPMIN', KEYS[1], n)
local members = {}
local exp = ARGV[3]
-- Batched writes keep the per-member cost low; chunks stay well inside
-- Lua's stack limit for unpack.
local CHUNK = 1000
for first = 1, #popped / 2, CHUNK do
  local last = math.min(first + CHUNK - 1, #popped / 2)
  local toks, exps, names = {}, {}, {}
  for i = first, last do
    local m = popped[2 * i - 1]
    members[i] = m
    toks[#toks + 1] = m
    -- nonce (16 bytes) then the exact expiry; the zset score is for sweeping.
    toks[#toks + 1] = ARGV[3 + i] .. exp
    exps[#exps + 1] = exp
    exps[#exps + 1] = m
    names[#names + 1] = m
  end
  redis.call('HSET', KEYS[3], unpack(toks))
  redis.call('ZADD', KEYS[4], unpack(exps))
  redis.call('ZREM', KEYS[2], unpack(names))
end

if #members > 0 then
  redis.call('HINCRBY', KEYS[7], 'admitted', #members)
  redis.call('HINCRBY', KEYS[8], string.format('%d', math.floor(now / 1000000)), #members)
end
return members
