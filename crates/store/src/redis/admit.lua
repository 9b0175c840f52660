-- admit: release the best-ranked waiters with one outstanding token each.
-- KEYS: 1 queue, 2 seen, 3 held, 4 token expiries, 5 active, 6 admin state,
--       7 totals, 8 admissions per second
-- ARGV: 1 max, 2 max_active, 3 token expiry (us), 4.. one `held` token entry
--       per admission ('t' .. nonce, tagged by the caller)
-- Returns the admitted members, best first; member i got ARGV[3 + i].
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]

local st = redis.call('GET', KEYS[6])
if st == 'paused' or st == 'closed' then return {} end

-- Sessions and tokens hold their slot until the expire sweep drops them:
-- the slot count is the size of two sets, so no counter can drift.
local used = redis.call('ZCARD', KEYS[5]) + redis.call('ZCARD', KEYS[4])
local n = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used, #ARGV - 3)
if n <= 0 then return {} end

-- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: the scores are not needed,
-- and formatting and parsing them is a large part of a pop's cost.
local members = redis.call('ZRANGE', KEYS[1], 0, n - 1)
if #members == 0 then return members end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)

local exp = ARGV[3]
local tail = exact_text(exp)
-- One HSET, ZADD and ZREM per chunk of members, not per member; chunks
-- keep `unpack` well inside Lua's stack limit (~8000 values).
local CHUNK = 1000
for first = 1, #members, CHUNK do
  local last = math.min(first + CHUNK - 1, #members)
  local held, exps = {}, {}
  local j = 1
  for i = first, last do
    local m = members[i]
    held[j] = m
    held[j + 1] = ARGV[3 + i] .. tail
    exps[j] = exp
    exps[j + 1] = m
    j = j + 2
  end
  redis.call('HSET', KEYS[3], unpack(held))
  redis.call('ZADD', KEYS[4], unpack(exps))
  redis.call('ZREM', KEYS[2], unpack(members, first, last))
end

redis.call('HINCRBY', KEYS[7], 'admitted', #members)
redis.call('HINCRBY', KEYS[8], string.format('%d', math.floor(now / 1000000)), #members)
return members
