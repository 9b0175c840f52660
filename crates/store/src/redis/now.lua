-- now: the canonical clock (Redis TIME) of the node that holds KEYS[1]'s slot,
-- in microseconds. Also serves as the per-event readiness probe.
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
