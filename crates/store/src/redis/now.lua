-- now: the canonical clock (Redis TIME) of the node that holds KEYS[1]'s slot,
-- in microseconds. (The readiness probe, which must also write, is probe.lua.)
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
