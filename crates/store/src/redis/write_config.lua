-- write_config: stores (ARGV[2] = 'set': the document ARGV[3]) or removes
-- (ARGV[2] = 'del') one event's config document (the hash KEYS[1], field
-- ARGV[1]) and moves the documents' generation (KEYS[2]) on, in one step:
-- apart, a replace read before the change could land between the two and
-- overwrite it unseen.
if ARGV[2] == 'set' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('INCR', KEYS[2])
return 1
