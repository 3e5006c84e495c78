-- Compare-and-delete: drop the claim only while it is ours (idempotency/doc.go: a claim is released only by its holder), so
-- a worker whose lease expired never deletes the claim of the worker that
-- took over.
-- KEYS[1] the key
-- ARGV[1] our claim value: "c:" .. token
-- Returns 1 when released, 0 when the key no longer holds our claim.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
