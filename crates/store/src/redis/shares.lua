-- Prepended to every script that reads the gateway nodes' holds.
--
-- `shares` maps each node id to its hold, `reserve:pending:expiry_us`.

-- Drops the lapsed holds (and unreadable ones) from `shares` and returns
-- what the nodes other than `node` hold at `now` (µs), reserve and pending.
local function other_holds(shares, node, now)
  local others = 0
  local flat = redis.call('HGETALL', shares)
  for i = 1, #flat, 2 do
    local r, p, exp = string.match(flat[i + 1], '^(%d+):(%d+):(%d+)$')
    if not exp or tonumber(exp) <= now then
      redis.call('HDEL', shares, flat[i])
    elseif flat[i] ~= node then
      others = others + tonumber(r) + tonumber(p)
    end
  end
  return others
end
