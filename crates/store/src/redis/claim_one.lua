-- claim_tick: one guard, for exactly one caller per number within its life.
-- KEYS: 1 the guard
-- ARGV: 1 the guard's lifetime in ms
-- Returns 1 when this caller holds it now, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if claim(KEYS[1], now, ARGV[1]) then return 1 end
return 0
