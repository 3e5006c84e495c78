-- DPCS quota engine, a part of apply.lua and grant.lua (see policy.lua):
-- the threshold crossings of one month's pool.
-- In: pk (the pool key), q (its q field), thr (the family's list), rem and
-- total (the pool after the change), pw (the pool hash's writes so far, or
-- nil). Out: crossed ("pct:arm,…"), pw with the fired thresholds and q.
-- q = "<pp>|<thr>": pp the largest threshold of the family's list thr that
-- has not fired this month, two digits ("--" when every one has). No threshold of thr can fire
-- while rem * 100 > p * total, so only then is the list parsed and are the
-- a:<pct> (fired) and n:<pct> (arms) fields read. Firing updates q here;
-- pool.lua deletes it when it re-arms a threshold, and a changed list no
-- longer matches its thr.
local skip = false
if q and #q == 3 + #thr and string.find(q, thr, 4, true) == 4 then
  local a, b = string.byte(q, 1, 2)
  skip = a == 45 or rem * 100 > ((a - 48) * 10 + b - 48) * total -- '-': none left
end
if not skip then
  local pcts, names, np = {}, {}, 0
  for p in string.gmatch(thr, '%d+') do
    np = np + 1
    pcts[np] = tonumber(p)
    names[np] = p
  end
  local fields = {}
  for i = 1, np do
    fields[i], fields[np + i] = 'a:' .. names[i], 'n:' .. names[i]
  end
  local st = {}
  if np > 0 then st = redis.call('HMGET', pk, unpack(fields)) end
  local fired, top = nil, nil
  pw = pw or {}
  local n = #pw
  for i = 1, np do
    local p = pcts[i]
    if st[i] == false then
      if rem * 100 <= p * total then
        -- n:<pct> counts how often it fired this month (re-armed by top-ups).
        local arm = string.format('%d', (tonumber(st[np + i]) or 0) + 1)
        fired = fired or {}
        fired[#fired + 1] = names[i] .. ':' .. arm
        pw[n + 1], pw[n + 2], pw[n + 3], pw[n + 4] = fields[np + i], arm, fields[i], '1'
        n = n + 4
      elseif not top or p > top then
        top = p
      end
    end
  end
  pw[n + 1], pw[n + 2] = 'q', (top and string.format('%02d', top) or '--') .. '|' .. thr
  if fired then crossed = table.concat(fired, ',') end
end
