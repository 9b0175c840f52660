-- probe: the per-event readiness check. A write the event's node must
-- accept (KEYS[1], lapsing after a second), then its clock in microseconds.
-- Redis still answers reads while it refuses writes: unable to persist
-- (MISCONF), out of memory under noeviction (OOM), or a replica after a
-- failover (READONLY). An event cannot be served then (no join, no
-- admission), so the probe must fail and the node drain, where a read alone
-- kept the node out of drain while every join failed.
redis.call('SET', KEYS[1], '1', 'PX', 1000)
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
