-- anchor: the event's anchor (KEYS[1]) in µs, set at the canonical TIME by
-- the first call and returned unchanged by every later one. One script, so
-- nodes starting together cannot both find it absent and each set their own.
-- Written with '%d', as the other scripts write times: integer digits,
-- whatever the server's own formatting of a Lua number.
local kept = redis.call('GET', KEYS[1])
if kept then
  return tonumber(kept)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('SET', KEYS[1], string.format('%d', now))
return now
