-- admin_state_if: sets the event's admin state KEYS[1] to ARGV[2] only while
-- it is ARGV[1] (unset reads as running); answers nil when it set it, else
-- the state found. Admin changes on several nodes each decide on what they
-- read: unconditional, a resume on one node undid a close another had just
-- answered.
local cur = redis.call('GET', KEYS[1]) or 'running'
if cur ~= ARGV[1] then
  return cur
end
redis.call('SET', KEYS[1], ARGV[2])
return false
