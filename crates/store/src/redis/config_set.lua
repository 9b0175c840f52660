-- config_set: the documents' generation (KEYS[2], nil when never moved)
-- and every event's config document (the hash KEYS[1]) in one read, so a
-- replace made at that generation was checked against exactly these.
return {redis.call('GET', KEYS[2]), redis.call('HGETALL', KEYS[1])}
