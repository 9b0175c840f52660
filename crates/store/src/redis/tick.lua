
-- tick: claims an admission tick and, when this caller wins it, reads what
-- the tick needs in the same step, so a node across a network waits one
-- round trip before it decides instead of two (claim, then the reads).
-- KEYS: 1-7 as stats.lua's, 8 the tick's guard, 9 the admin state
-- ARGV: 1 the guard's lifetime in ms
-- Returns {0, 0, {}, false} when another caller holds the tick, else
-- {1, now_us, <stats.lua's numbers>, the admin state (false when unset)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not claim(KEYS[8], now, ARGV[1]) then
  return {0, 0, {}, false}
end
return {1, now, stats(KEYS), redis.call('GET', KEYS[9])}
