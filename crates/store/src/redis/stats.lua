-- stats(K): live numbers of one event at canonical TIME, as a function
-- prepended to the scripts that read them (stats, tick, expire_read).
-- K: 1 queue, 2 active, 3 held, 4 totals, 5 admissions/s,
--    6 churn/s, 7 no-shows/s
-- Returns {waiting, active, outstanding, admitted_total, redeemed_total,
--          admitted_1m, admitted_5m, churn_1m, no_shows_5m}.
local function stats(K)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local sec = math.floor(now / 1000000)

  -- Sum of the per-second buckets of the last `span` seconds.
  local function recent(key, span)
    local flat = redis.call('HGETALL', key)
    local sum = 0
    for i = 1, #flat, 2 do
      if tonumber(flat[i]) > sec - span then sum = sum + tonumber(flat[i + 1]) end
    end
    return sum
  end

  local totals = redis.call('HMGET', K[4], 'admitted', 'redeemed')
  -- `held` has one entry per outstanding token and per active session.
  local active = redis.call('ZCARD', K[2])
  return {
    redis.call('ZCARD', K[1]),
    active,
    redis.call('HLEN', K[3]) - active,
    tonumber(totals[1] or 0),
    tonumber(totals[2] or 0),
    recent(K[5], 60),
    recent(K[5], 300),
    recent(K[6], 60),
    recent(K[7], 300),
  }
end
