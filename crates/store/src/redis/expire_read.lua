-- expire_read: the sweep (expire.lua, prepended as the function `sweep`)
-- and, once it leaves nothing for another call, the counts after it
-- (stats.lua) in the same step: the admission tick that sweeps decides on
-- those counts, and reading them in a call of their own cost a round trip.
-- KEYS: 1-13 as expire.lua's, 14 totals
-- ARGV: as expire.lua's
-- Returns expire.lua's four numbers, then stats.lua's nine when the fourth
-- (more to sweep) is 0, else an empty list.
local swept = sweep()
local counts = {}
if swept[4] == 0 then
  counts = stats({KEYS[1], KEYS[6], KEYS[3], KEYS[14], KEYS[9], KEYS[10], KEYS[11]})
end
return {swept[1], swept[2], swept[3], swept[4], counts}
