-- replace_config: stores an event's config document (ARGV[2]) in the
-- configs hash (KEYS[1], field ARGV[1]) only while the field still holds
-- what the caller read: nothing when ARGV[3] is '0', else exactly ARGV[4].
-- 1 when stored, 0 when another writer changed it first. One script, so a
-- change made between the caller's read and this write is never
-- overwritten unseen.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local same
if ARGV[3] == '0' then
  same = cur == false
else
  same = cur == ARGV[4]
end
if not same then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
