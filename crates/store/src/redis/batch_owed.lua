-- batch_owed: records what the batch that began at ARGV[1] (ms) still owes
-- (ARGV[2]) in KEYS[1] as "<start>:<owed>", kept ARGV[3] ms; a record of a
-- later batch is never replaced by an earlier one's (a node's late tick).
local cur = redis.call('GET', KEYS[1])
if cur then
  local start = tonumber(string.match(cur, '^(-?%d+):'))
  if start and start > tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return 1
