-- DPCS quota engine: the state marker, which tells whether the Redis state is
-- the one that produced the decisions already announced (see doc/architecture.md,
-- "Never trust Redis blindly"). One marker hash per Redis node (master).
--
-- KEYS[1] <prefix>dpcs:state:{<tag>}   hash  g (generation), w:<stream> (watermark:
--                                             the next position after the last judged)
-- ARGV[1] op, ARGV[2] generation, then per op:
--   check   ARGV[3..] stream, from pairs: the batch judges stream positions from
--           `from` on. Returns {0, ''} when the marker has generation ARGV[2] and no
--           stream's watermark is below its `from` (a stream without a watermark
--           is new to the generation only from position 0); else {1, reason}.
--   advance ARGV[3..] stream, from, to triples: if the check (with these froms)
--           still passes, raise each watermark to its `to` and return 1; else
--           return 0 (the batch's results must not be used).
--   begin   a rebuild starts: returns the marker's flat fields (watermarks included)
--           and sets the generation to ARGV[2] ("rebuilding:<new>"), so every check
--           and advance of the old generation fails from now on.
--   finish  ARGV[3..] stream, position pairs: the rebuild is done; the marker is
--           replaced by generation ARGV[2] and these watermarks.
--   get     returns the marker's flat fields.
local op, gen = ARGV[1], ARGV[2]
if op == 'check' then
  local g = redis.call('HGET', KEYS[1], 'g')
  if not g then
    return {1, 'no state marker: this Redis node lost its data or was never rebuilt from SQL'}
  end
  if g ~= gen then
    return {1, 'state generation is ' .. g .. ', expected ' .. gen}
  end
  for i = 3, #ARGV, 2 do
    local w = tonumber(redis.call('HGET', KEYS[1], 'w:' .. ARGV[i]))
    local from = tonumber(ARGV[i + 1])
    if w and w < from then
      return {1, 'stream ' .. ARGV[i] .. ': this Redis node has judged up to position ' .. string.format('%d', w) ..
        ' but position ' .. ARGV[i + 1] .. ' is next: its state is older than what was committed'}
    end
    if not w and from > 0 then
      return {1, 'stream ' .. ARGV[i] .. ': this Redis node has no position for it but position ' .. ARGV[i + 1] ..
        ' is next: its state is older than what was committed'}
    end
  end
  return {0, ''}
elseif op == 'advance' then
  if redis.call('HGET', KEYS[1], 'g') ~= gen then return 0 end
  local ws = {}
  for i = 3, #ARGV, 3 do
    local w = tonumber(redis.call('HGET', KEYS[1], 'w:' .. ARGV[i]))
    local from = tonumber(ARGV[i + 1])
    if (w and w < from) or (not w and from > 0) then return 0 end
    ws[i] = w
  end
  for i = 3, #ARGV, 3 do
    local to = tonumber(ARGV[i + 2])
    if not ws[i] or ws[i] < to then redis.call('HSET', KEYS[1], 'w:' .. ARGV[i], ARGV[i + 2]) end
  end
  return 1
elseif op == 'begin' then
  local flat = redis.call('HGETALL', KEYS[1])
  redis.call('HSET', KEYS[1], 'g', gen)
  return flat
elseif op == 'finish' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'g', gen)
  for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], 'w:' .. ARGV[i], ARGV[i + 1]) end
  return 1
elseif op == 'get' then
  return redis.call('HGETALL', KEYS[1])
end
return redis.error_reply('DPCS unknown state op')
