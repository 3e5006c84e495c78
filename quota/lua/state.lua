-- DPCS quota engine: the state marker, which tells whether the Redis state is
-- the one that produced the decisions already announced (see doc/architecture.md,
-- "Never trust Redis blindly"). One marker hash per Redis node (master).
--
-- KEYS[1] <prefix>dpcs:state:{<tag>}   hash  g (generation), w:<stream> (watermark:
--                                             the next position after the last judged),
--                                             n (the node's identity the generation was
--                                             named on), b (the identity a rebuild began on),
--                                             x (set by a check that found another identity:
--                                             no advance passes until a rebuild names the node)
-- The node's identity is its run_id and replication id (INFO): a restart (from
-- whatever snapshot) gives a node a new run_id, a promoted replica is another
-- process with a new replication id, so no rollback of a node's data keeps it
-- (doc/architecture.md, "No window"). A server without INFO server (miniredis,
-- which cannot roll back: it has no persistence) has the identity "".
-- ARGV[1] op, ARGV[2] generation, then per op:
--   guard   ARGV[3..] stream, from, to triples: the batch judged stream positions
--           from `from` on, and `to` is next after it. Sent after the batch's scripts
--           in its pipeline (one state call per node and batch). When the marker has
--           generation ARGV[2], names this node's identity (and no earlier guard found
--           another: x), and no stream's watermark is below its `from` (a stream
--           without a watermark is new to the generation only from position 0), it
--           raises each watermark to its `to` and returns {0, ''}; else {1, reason},
--           nothing is raised, and the batch's results must not be used. Called with
--           to = from, it only checks.
--   begin   a rebuild starts: returns the marker's flat fields (watermarks included)
--           and sets the generation to ARGV[2] ("rebuilding:<new>") and b to the
--           node's identity, so every check and advance of the old generation fails
--           from now on.
--   finish  ARGV[3..] stream, position pairs: the rebuild is done; the marker is
--           replaced by generation ARGV[2], this node's identity and these
--           watermarks — unless the marker says the rebuild began on another
--           identity (the node restarted or failed over meanwhile, from a snapshot
--           taken after the rebuild began: its restores may be lost): then an error
--           reply, and nothing changes.
--   distrust  a judge charged what it could not record: the generation becomes
--           "distrusted:<generation>", so every check fails until a rebuild (a
--           marker being rebuilt or without a generation is left alone).
--   get     returns the marker's flat fields.
local function info(section, field)
  local r = redis.pcall('INFO', section)
  if type(r) ~= 'string' then return '' end
  local at = string.find(r, field .. ':', 1, true)
  if not at then return '' end
  local from = at + #field + 1
  return string.sub(r, from, (string.find(r, '\r', from, true) or (#r + 1)) - 1)
end
local function identity()
  return info('server', 'run_id') .. '/' .. info('replication', 'master_replid')
end

-- stale returns why the marker does not vouch for a batch judging generation
-- gen from the froms of ARGV's stream, from, to triples, or nil and the
-- watermarks read (by ARGV index); a node found with another identity is
-- flagged (x) for every guard until a rebuild names it.
local function stale(gen)
  local m = redis.call('HMGET', KEYS[1], 'g', 'n', 'x')
  local g = m[1]
  if not g then
    return 'no state marker: this Redis node lost its data or was never rebuilt from SQL'
  end
  if g ~= gen then
    return 'state generation is ' .. g .. ', expected ' .. gen
  end
  local id = identity()
  if m[2] ~= id then
    -- Flagged: no guard passes here until a rebuild names the node, even
    -- if it later looks like the named one again.
    redis.call('HSET', KEYS[1], 'x', id)
    return 'this Redis node (' .. id .. ') is not the one state generation ' .. gen .. ' was named on (' ..
      (m[2] or 'none') .. '): it restarted or a replica took over, and may have lost writes'
  end
  if m[3] then
    return 'this Redis node (' .. m[3] .. ') was found to be another than the one state generation ' .. gen ..
      ' was named on: nothing more is vouched for until a rebuild'
  end
  local ws = {}
  for i = 3, #ARGV, 3 do
    local w = tonumber(redis.call('HGET', KEYS[1], 'w:' .. ARGV[i]))
    local from = tonumber(ARGV[i + 1])
    if w and w < from then
      return 'stream ' .. ARGV[i] .. ': this Redis node has judged up to position ' .. string.format('%d', w) ..
        ' but position ' .. ARGV[i + 1] .. ' is next: its state is older than what was committed'
    end
    if not w and from > 0 then
      return 'stream ' .. ARGV[i] .. ': this Redis node has no position for it but position ' .. ARGV[i + 1] ..
        ' is next: its state is older than what was committed'
    end
    ws[i] = w
  end
  return nil, ws
end

local op, gen = ARGV[1], ARGV[2]
if op == 'guard' then
  local reason, ws = stale(gen)
  if reason then return {1, reason} end
  for i = 3, #ARGV, 3 do
    local to = tonumber(ARGV[i + 2])
    if not ws[i] or ws[i] < to then redis.call('HSET', KEYS[1], 'w:' .. ARGV[i], ARGV[i + 2]) end
  end
  return {0, ''}
elseif op == 'begin' then
  local flat = redis.call('HGETALL', KEYS[1])
  redis.call('HSET', KEYS[1], 'g', gen, 'b', identity())
  return flat
elseif op == 'finish' then
  local id = identity()
  local b = redis.call('HGET', KEYS[1], 'b')
  if b and b ~= id then
    return redis.error_reply('DPCS this Redis node restarted or failed over during the rebuild')
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'g', gen, 'n', id)
  for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], 'w:' .. ARGV[i], ARGV[i + 1]) end
  return 1
elseif op == 'distrust' then
  local g = redis.call('HGET', KEYS[1], 'g')
  if g and string.sub(g, 1, 11) ~= 'rebuilding:' and string.sub(g, 1, 11) ~= 'distrusted:' then
    redis.call('HSET', KEYS[1], 'g', 'distrusted:' .. g)
  end
  return 1
elseif op == 'get' then
  return redis.call('HGETALL', KEYS[1])
end
return redis.error_reply('DPCS unknown state op')
