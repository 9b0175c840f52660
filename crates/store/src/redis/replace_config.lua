-- replace_config: stores an event's config document (ARGV[2]) in the
-- configs hash (KEYS[1], field ARGV[1]) only while the documents'
-- generation (KEYS[2], absent = 0) is still ARGV[3], the one the caller
-- read with them, and moves it on. 1 when stored, 0 when any document
-- changed first. One script, so no change lands between the caller's
-- read and this write unseen.
local gen = tonumber(redis.call('GET', KEYS[2]) or '0')
if gen ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
