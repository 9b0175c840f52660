-- Prepended to every script that reads or writes the `held` hash.
--
-- `held` maps each member holding a slot to its entry: 't' .. the 16-byte
-- token nonce .. the token's expiry in decimal, or 's' for an active
-- session followed by the exact end in decimal only when the f64 score of
-- `active` cannot carry it. Real timestamps are far below 2^53, so the
-- common session entry is 1 byte instead of a second copy of the time.

local EXACT_LIMIT = 9007199254740992 -- 2^53

-- '' when a zset score keeps the integer time `t` (decimal text) exactly.
local function exact_text(t)
  if math.abs(tonumber(t)) < EXACT_LIMIT then return '' end
  return t
end

-- The {new, kind, a, b, text} reply for a member whose `held` entry is `v`:
-- kind 2 with the nonce then the decimal expiry, or kind 3 with the session
-- end. Redis prints an integral score below 2^53 as exact decimal digits.
local function held_state(v, m, active)
  if string.sub(v, 1, 1) == 't' then
    return {0, 2, 0, 0, string.sub(v, 2)}
  end
  local ends = string.sub(v, 2)
  if ends == '' then ends = redis.call('ZSCORE', active, m) or '' end
  return {0, 3, 0, 0, ends}
end
