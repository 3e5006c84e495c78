-- DPCS quota engine: restore a family's whole state from its source of truth
-- (Engine.Restore, RestoreUnrestored, RestoreClaimed and their batches), one
-- call per family, atomically with the checks that decide whether it lands.
-- KEYS[1] family:{f}   the family hash (g, the family's token; m:<cid> per member;
--           v:<cid> per customer with a policy version, kept for former members)
-- KEYS[2..] every other key of the family the restore replaces (pools, usage,
--           constraints, versions, budgets, grants, dedupe buckets): all in
--           the family's slot (the hash tag), each deleted before the writes
-- ARGV[1] mode: "f" restore whatever the family holds (Restore), "u" only
--         unless generation ARGV[2] restored it already (g's part before '~'),
--         "c" whatever generation restored it; "u" and "c" only while g is
--         ARGV[3], the token seen before the state was read
-- ARGV[4] n, ARGV[5..4+n] the member fields (m:<cid>) the family hash held
--         when the writes were computed (those of former members delete
--         their keys): the restore lands only while the hash holds exactly
--         these
-- then the writes, each: op ("h" HSET, "e" EXPIRE seconds), the
--         index of its key in KEYS, a count c, and c arguments
-- Returns 1 restored, 0 restored already by generation ARGV[2] (mode "u"),
-- -1 the token moved from ARGV[3], -2 the member fields changed (compute the
-- writes again). Nothing is written unless it returns 1.
local fam, mode = KEYS[1], ARGV[1]
if mode ~= 'f' then
  local g = redis.call('HGET', fam, 'g') or ''
  local base = g
  local at = string.find(g, '~', 1, true)
  if at then base = string.sub(g, 1, at - 1) end
  if mode == 'u' and base == ARGV[2] then return 0 end
  if g ~= ARGV[3] then return -1 end
end
local n = tonumber(ARGV[4])
local want = {}
for i = 5, 4 + n do want[ARGV[i]] = true end
local have = 0
-- The policy versions (v:<cid>) of the customers the family no longer has:
-- they outlive the membership (stale updates stay ignored), so they are
-- kept; a member's comes from the source of truth, with the writes.
local versions = {}
local held = redis.call('HGETALL', fam)
for j = 1, #held, 2 do
  local f = held[j]
  local p = string.sub(f, 1, 2)
  if p == 'm:' then
    if not want[f] then return -2 end
    have = have + 1
  elseif p == 'v:' then
    versions[#versions + 1] = f
    versions[#versions + 1] = held[j + 1]
  end
end
if have ~= n then return -2 end
for i = 1, #KEYS, 1000 do
  redis.call('DEL', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
local i = 5 + n
while i <= #ARGV do
  local op, key, c = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if op == 'h' then
    redis.call('HSET', key, unpack(ARGV, i + 3, i + 2 + c))
  else
    redis.call('EXPIRE', key, ARGV[i + 3])
  end
  i = i + 3 + c
end
for j = 1, #versions, 2 do
  if redis.call('HEXISTS', fam, 'm:' .. string.sub(versions[j], 3)) == 0 then
    redis.call('HSET', fam, versions[j], versions[j + 1])
  end
end
return 1
