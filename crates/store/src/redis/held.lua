-- Prepended to every script that reads or writes the `held` hash.
--
-- `held` maps each member holding a slot to its entry: 't' .. the 16-byte
-- token nonce, or 's' for an active session, either followed by the exact
-- expiry in decimal only when the f64 score of its sweep set (token expiries
-- or active) cannot carry it. Real timestamps are far below 2^53, so the
-- common entry is 17 or 1 bytes instead of a second copy of the time.

local EXACT_LIMIT = 9007199254740992 -- 2^53

-- '' when a zset score keeps the integer time `t` (decimal text) exactly.
local function exact_text(t)
  if math.abs(tonumber(t)) < EXACT_LIMIT then return '' end
  return t
end

-- The {new, kind, a, b, text} reply for a member whose `held` entry is `v`:
-- kind 2 with the nonce then the decimal expiry, or kind 3 with the session
-- end. Redis prints an integral score below 2^53 as exact decimal digits.
local function held_state(v, m, token_expiries, active)
  if string.sub(v, 1, 1) == 't' then
    local exp = string.sub(v, 18)
    if exp == '' then exp = redis.call('ZSCORE', token_expiries, m) or '' end
    return {0, 2, 0, 0, string.sub(v, 2, 17) .. exp}
  end
  local ends = string.sub(v, 2)
  if ends == '' then ends = redis.call('ZSCORE', active, m) or '' end
  return {0, 3, 0, 0, ends}
end
