-- Prepended to the scripts that claim a guard: an admission tick, or a
-- batch (numbered above every tick).
--
-- Claims `key` for `ttl` ms at `now` (us): held when another caller claimed
-- it at or before `now` within its lifetime. A claim stamped after `now`
-- was made while this clock ran ahead (a failover to a replica whose clock
-- is behind, a clock set back): it guards nothing now, and kept, it would
-- refuse every tick and batch of the step until the clock caught up (its
-- PX expiry is counted on the clock that stepped back). A guard set by an
-- earlier version holds `1`, which counts as claimed long ago.
local function claim(key, now, ttl)
  local at = tonumber(redis.call('GET', key))
  if at and at <= now then return false end
  redis.call('SET', key, now, 'PX', ttl)
  return true
end
