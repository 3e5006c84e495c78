-- DPCS quota engine: judge one usage event atomically.
-- Generation (quota.OnTouch) -> dedupe -> membership -> BLOCK:ACCESS -> app/category blocks (but an
-- EXCEPT:APP in effect) -> time windows (but EXCEPT:TIME in effect, ALLOW:APP / ALLOW:CATEGORY apps) ->
-- DAILY then MONTHLY limit (raised by the day's and month's extras, the monthly one moved by the month's gifts)
-- -> family pool -> deduct -> threshold crossings.
-- Semantics are those of policy.Evaluate; quota's property tests hold them equal.
-- Byte counts stay below 2^46 (policy.MaxBytes) and the pool total is bounded
-- by it, so remaining * 100 is exact; numbers are written as integers (%d).
--
-- KEYS[1] family:{f}                               hash  plan, thr, g, m:<cid> (members)
-- KEYS[2] family:{f}:customer:{c}:constraints      hash  #c, #w (compiled constraints and windows,
--                                                        see quota/compiled.go), constraint key -> value
-- KEYS[3] family:{f}:pool:{YYYYMM}                 hash  used, topup, a:<pct> (fired alerts),
--                                                        n:<pct> (times fired this month),
--                                                        u:<cid> (the member's month),
--                                                        d:<cid> ("DD:bytes", the member's latest day)
-- KEYS[4] family:{f}:customer:{c}:usage:{YYYYMM}   hash  d:<DD>, the member's days other than
--                                                        the slot's (m: the month, as an earlier
--                                                        engine kept it)
-- KEYS[5] family:{f}:evt:<b>                       hash  eventId -> stored result (dedupe), "" = 1
--                                                        once the bucket's TTL is set,
-- KEYS[6] family:{f}:evt:<b-1>                           by arrival: b = now / window
-- ARGV: 1 customerId, 2 bytes, 3 appId, 4 category, 5 minute of day, 6 ISO weekday,
--       7 day "YYYYMMDD", 8 eventId, 9 state generation ("" = unchecked)
-- The engine's constants are written into the script when the engine is made
-- (quota.applySource; every argument costs the server a string per call):
-- DPCS_BUCKET_TTL the dedupe bucket's TTL in s (three windows), DPCS_MONTH_TTL
-- the month keys' TTL in s, DPCS_THRESHOLDS the default thresholds ("50,30,10"),
-- DPCS_MAX_TOTAL the largest pool total.
-- Returns {duplicate 0|1, "decision|remaining|total|daily|monthly|throttle|crossed|rule"},
-- crossed being "pct:arm,…" (arm: the how-manyth time pct fired this month), or
-- {2, generation} without changing anything when the family was restored by
-- another state generation than ARGV[9] (a rebuild is running or done), or
-- by none ("") in a generation restored on touch (quota.OnTouch).

-- The family first: a dedupe record of a family not restored in this
-- generation may be one a stale state wrote, whose result was never used.
local fam = redis.call('HMGET', KEYS[1], 'plan', 'thr', 'm:' .. ARGV[1], 'g')
-- A generation whose second byte is ':' is restored on touch: a family
-- that does not name it (g absent too) is restored from SQL first.
if ARGV[9] ~= '' and fam[4] ~= ARGV[9] and (fam[4] or string.byte(ARGV[9], 2) == 58) then
  return {2, fam[4] or ''}
end

-- The bucket's field "" (no event id is empty) marks that its TTL is set.
local bucket = redis.call('HMGET', KEYS[5], ARGV[8], '')
local stored = bucket[1] or redis.call('HGET', KEYS[6], ARGV[8])
if stored then
  return {1, stored}
end

-- No local functions: a closure is built on every call. Numbers are parsed
-- once, strings matched only where a constraint asks for it.
local bytes = tonumber(ARGV[2])
local app, category = ARGV[3], ARGV[4]
local now, wd = tonumber(ARGV[5]), string.byte(ARGV[6]) - 48
local dd = string.sub(ARGV[7], 7, 8)
local uf, df = 'u:' .. ARGV[1], 'd:' .. ARGV[1]

local thr = fam[2] or 'DPCS_THRESHOLDS'
local pool = redis.call('HMGET', KEYS[3], 'used', 'topup', uf, df, 'q')
local used = tonumber(pool[1]) or 0
-- A plan raised after a month's top-ups can leave an old month above the
-- bound; the bound wins, so every later number stays exact.
local total = (tonumber(fam[1]) or 0) + (tonumber(pool[2]) or 0)
local maxtotal = DPCS_MAX_TOTAL
if total > maxtotal then total = maxtotal end
-- The member's counters live in the pool hash: u:<cid> the month, d:<cid>
-- "DD:bytes" the member's latest day (the slot), so the pool and the member
-- are one read and one write. Every other day of the member's month is d:<DD>
-- in KEYS[4], read only when the event's day is not the slot's: a member's
-- first event of a day, a late event of an earlier day, or a month begun by
-- an earlier engine (no u:<cid> yet: its month total is KEYS[4]'s m).
local monthly, daily = tonumber(pool[3]), 0
local slot = pool[4]
-- today: the slot holds the event's day (found at its start, no string made).
local today = slot and string.find(slot, dd, 1, true) == 1
local sd = nil -- the slot's day, when it is another
if today then
  daily = tonumber(string.sub(slot, 4))
else
  sd = slot and string.sub(slot, 1, 2)
  local old = redis.call('HMGET', KEYS[4], 'm', 'd:' .. dd)
  daily = tonumber(old[2]) or 0
  if not monthly then monthly = tonumber(old[1]) end
end
monthly = monthly or 0

local decision, rule, throttle = nil, '', '0'

if fam[3] ~= '1' then
  decision, rule = 'BLOCKED_NOT_MEMBER', 'MEMBERSHIP'
else
  -- The compiled constraints (quota/compiled.go), the hash's first fields,
  -- and the event's app and category blocks. #c is
  --   <access 0|1><extras 0|1><daily>,<monthly>,<throttle>
  -- and #w the time windows: per window, start and end minute as two
  -- characters each (48 + m / 40, 48 + m % 40), the days Mon..Sun as seven
  -- '0'/'1', the name (the rule key after BLOCK:TIME:, START for the night
  -- window) and a space; the night window first, then the rest by key. Read
  -- with string.byte and string.find, which make no strings. A hash written
  -- by an earlier engine has no #c: it is read whole, and its windows
  -- compiled here (malformed ones are ignored).
  local cf = redis.call('HMGET', KEYS[2], '#c', '#w', 'BLOCK:APP:' .. app, 'BLOCK:CATEGORY:' .. category)
  local cc, windows = cf[1], cf[2] or ''
  -- Where #c's limits end (p1, p2), or the values read whole (c).
  local p1, p2, c
  if cc then
    p1 = string.find(cc, ',', 3, true)
    p2 = string.find(cc, ',', p1 + 1, true)
  else
    local flat = redis.call('HGETALL', KEYS[2])
    local w = {}
    c = {}
    for i = 1, #flat, 2 do c[flat[i]] = flat[i + 1] end
    local DAY = {MON = 1, TUE = 2, WED = 3, THU = 4, FRI = 5, SAT = 6, SUN = 7}
    for k, v in pairs(c) do
      local night = k == 'BLOCK:TIME:START'
      local sh, sm, eh, em, spec
      if night then
        sh, sm = string.match(v, '^(%d%d)(%d%d)$')
        eh, em = string.match(c['BLOCK:TIME:END'] or '', '^(%d%d)(%d%d)$')
      elseif string.sub(k, 1, 11) == 'BLOCK:TIME:' and k ~= 'BLOCK:TIME:END' then
        sh, sm, eh, em, spec = string.match(v, '^(%d%d)(%d%d)%-(%d%d)(%d%d)@(.+)$')
        if not sh then sh, sm, eh, em = string.match(v, '^(%d%d)(%d%d)%-(%d%d)(%d%d)$') end
      end
      sh, sm, eh, em = tonumber(sh), tonumber(sm), tonumber(eh), tonumber(em)
      if sh and eh and sh <= 23 and sm <= 59 and eh <= 23 and em <= 59 then
        -- Days: "MON-FRI" / "SAT,SUN" / "FRI-MON".
        local set, ok = {1, 1, 1, 1, 1, 1, 1}, true
        if spec then
          set, ok = {0, 0, 0, 0, 0, 0, 0}, false
          for item in string.gmatch(spec, '[^,]+') do
            local a, b = string.match(item, '^(%u+)%-(%u+)$')
            if not a then a, b = item, item end
            local d, j = DAY[a], DAY[b]
            if not d or not j then ok = false break end
            while true do
              set[d] = 1
              if d == j then break end
              d = d % 7 + 1
            end
            ok = true
          end
        end
        if ok then
          local ws, we = sh * 60 + sm, eh * 60 + em
          local e = string.char(48 + math.floor(ws / 40), 48 + ws % 40, 48 + math.floor(we / 40), 48 + we % 40) ..
            table.concat(set) .. string.sub(k, 12) .. ' '
          if night then table.insert(w, 1, e) else w[#w + 1] = e end
        end
      end
    end
    windows = table.concat(w)
  end

  -- The event's local time YYYYMMDDHHMM as a number (12 digits, exact),
  -- what the exceptions' ends are compared with; made only where one may
  -- apply.
  local stamp = nil
  if (c and c['BLOCK:ACCESS'] == '1') or (cc and string.byte(cc, 1) == 49) then
    decision, rule = 'BLOCKED_ACCESS', 'BLOCK:ACCESS'
  elseif (app ~= '' and cf[3] == '1') or (category ~= '' and cf[4] == '1') then
    -- EXCEPT:APP:<app> = YYYYMMDDHHMM lifts the app's own and its
    -- category's block until then (read on this path only).
    local upto = app ~= '' and redis.call('HGET', KEYS[2], 'EXCEPT:APP:' .. app)
    stamp = tonumber(ARGV[7]) * 10000 + math.floor(now / 60) * 100 + now % 60
    if not upto or stamp >= tonumber(upto) then
      if app ~= '' and cf[3] == '1' then
        decision, rule = 'BLOCKED_APP', 'BLOCK:APP:' .. app
      else
        decision, rule = 'BLOCKED_APP', 'BLOCK:CATEGORY:' .. category
      end
    end
  end

  -- Time windows: is now inside [s, e) on an allowed day? Wrapped windows
  -- belong to their start day; s == e is the whole day. The night window
  -- wins, then the named window whose name is first byte-wise.
  if not decision and windows ~= '' then
    local prev = (wd + 5) % 7 + 1
    local best = nil
    local pos, n = 1, #windows
    while pos < n do
      local a, b, c, d = string.byte(windows, pos, pos + 3)
      local s, e = (a - 48) * 40 + b - 48, (c - 48) * 40 + d - 48
      local stop = string.find(windows, ' ', pos + 11, true)
      local onwd = string.byte(windows, pos + 3 + wd) == 49 -- '1'
      local hit
      if s == e then hit = onwd
      elseif s < e then hit = onwd and now >= s and now < e
      else hit = (now >= s and onwd) or (now < e and string.byte(windows, pos + 3 + prev) == 49) end
      local k = hit and string.sub(windows, pos + 11, stop - 1)
      pos = stop + 1
      if hit then
        if k == 'START' then
          best = k
          break
        elseif best == nil then
          best = k
        else
          -- Byte-wise k < best (Lua's < follows the server's collation locale).
          local less = #k < #best
          for j = 1, math.min(#k, #best) do
            local x, y = string.byte(k, j), string.byte(best, j)
            if x ~= y then less = x < y break end
          end
          if less then best = k end
        end
      end
    end
    if best then
      -- Downtime spares the apps and categories always allowed in it
      -- (ALLOW:APP:<app>, ALLOW:CATEGORY:<c>) and lifts while EXCEPT:TIME =
      -- YYYYMMDDHHMM lasts ("30분 더"): read only when a window holds now.
      local x = redis.call('HMGET', KEYS[2], 'EXCEPT:TIME', 'ALLOW:APP:' .. app, 'ALLOW:CATEGORY:' .. category)
      stamp = stamp or tonumber(ARGV[7]) * 10000 + math.floor(now / 60) * 100 + now % 60
      if not ((app ~= '' and x[2] == '1') or (category ~= '' and x[3] == '1') or (x[1] and stamp < tonumber(x[1]))) then
        decision, rule = 'BLOCKED_TIME', 'BLOCK:TIME:' .. best
      end
    end
  end

  if not decision then
    -- The member's effective limits for the event's day (ARGV[7], YYYYMMDD)
    -- and month: LIMIT:DATA:DAILY / MONTHLY, each (when set) raised by the
    -- extras of that day and month, LIMIT:DATA:EXTRA:<YYYYMMDD> and
    -- LIMIT:DATA:EXTRA:<YYYYMM> (policy.Constraints.EffectiveLimits). No
    -- limit stays no limit; extras of other periods are not read.
    -- LIMIT:DATA:GIFT:<YYYYMM>, data the member received less data it
    -- gave away this month (signed), moves the monthly limit only (never
    -- below 0).
    local dl, ml, xd, xm, gv
    if c then
      dl, ml = tonumber(c['LIMIT:DATA:DAILY']), tonumber(c['LIMIT:DATA:MONTHLY'])
      xd, xm = c['LIMIT:DATA:EXTRA:' .. ARGV[7]], c['LIMIT:DATA:EXTRA:' .. string.sub(ARGV[7], 1, 6)]
      gv = c['LIMIT:DATA:GIFT:' .. string.sub(ARGV[7], 1, 6)]
    else
      -- A limit is set when its field is not empty (p1 > 3, p2 > p1 + 1).
      if p1 > 3 then dl = tonumber(string.sub(cc, 3, p1 - 1)) end
      if p2 > p1 + 1 then ml = tonumber(string.sub(cc, p1 + 1, p2 - 1)) end
      if (dl or ml) and string.byte(cc, 2) == 49 then
        local mo = string.sub(ARGV[7], 1, 6)
        local x = redis.call('HMGET', KEYS[2], 'LIMIT:DATA:EXTRA:' .. ARGV[7], 'LIMIT:DATA:EXTRA:' .. mo, 'LIMIT:DATA:GIFT:' .. mo)
        xd, xm, gv = x[1], x[2], x[3]
      end
    end
    if dl or ml then
      local extra = (tonumber(xd) or 0) + (tonumber(xm) or 0)
      if dl then dl = dl + extra end
      if ml then
        ml = ml + extra + (tonumber(gv) or 0)
        if ml < 0 then ml = 0 end
      end
    end

    local r = total - used
    if r < 0 then r = 0 end
    if dl and daily + bytes > dl then
      decision, rule = 'BLOCKED_LIMIT_DAILY', 'LIMIT:DATA:DAILY'
    elseif ml and monthly + bytes > ml then
      decision, rule = 'BLOCKED_LIMIT_MONTHLY', 'LIMIT:DATA:MONTHLY'
    elseif r < bytes then
      decision = 'BLOCKED_FAMILY_QUOTA'
      if fam[1] then rule = 'POOL' else rule = 'POOL:UNPROVISIONED' end
    else
      decision = 'ALLOWED'
      if c then
        throttle = string.format('%d', tonumber(c['THROTTLE:SPEED']) or 0)
      else
        -- Stored canonical: a whole number, as '%d' writes it.
        throttle = string.sub(cc, p2 + 1)
        if throttle == '' then throttle = '0' end
      end
    end
  end
end

-- The pool hash's writes of this event, made in one HSET at the end, and
-- the member's month and day as written (allowed events).
local pw, ms, ds = nil, nil, nil
if decision == 'ALLOWED' then
  used, monthly, daily = used + bytes, monthly + bytes, daily + bytes
  ms, ds = string.format('%d', monthly), string.format('%d', daily)
  pw = {'used', string.format('%d', used), uf, ms}
  if today then
    pw[5], pw[6] = df, dd .. ':' .. ds
  elseif sd and tonumber(dd) < tonumber(sd) then
    -- An earlier day than the slot's: its counter stays in KEYS[4].
    redis.call('HSET', KEYS[4], 'd:' .. dd, ds)
    redis.call('EXPIRE', KEYS[4], 'DPCS_MONTH_TTL')
  else
    -- A later day (or the first): the slot's day moves to KEYS[4].
    pw[5], pw[6] = df, dd .. ':' .. ds
    if sd then
      redis.call('HSET', KEYS[4], 'd:' .. sd, string.sub(slot, 4))
      redis.call('EXPIRE', KEYS[4], 'DPCS_MONTH_TTL')
    end
  end
end

local rem = total - used
if rem < 0 then rem = 0 end

-- Crossings are judged on every event of a member, allowed or not, so a pool
-- that fell under a threshold by a plan cut is announced with the family's
-- next event even when every request is bigger than what is left.
-- q = "<pp>|<thr>": pp the largest threshold of the family's list thr that
-- has not fired this month, two digits ("--" when every one has). No threshold of thr can fire
-- while rem * 100 > p * total, so only then is the list parsed and are the
-- a:<pct> (fired) and n:<pct> (arms) fields read. Firing updates q here;
-- pool.lua deletes it when it re-arms a threshold, and a changed list no
-- longer matches its thr.
local crossed = ''
if decision ~= 'BLOCKED_NOT_MEMBER' and total > 0 then
  local q, skip = pool[5], false
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
    if np > 0 then st = redis.call('HMGET', KEYS[3], unpack(fields)) end
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
end
if pw then
  -- TTLs are set when a period key is created; keys that exist have theirs.
  redis.call('HSET', KEYS[3], unpack(pw))
  if pool[1] == false and pool[2] == false then redis.call('EXPIRE', KEYS[3], 'DPCS_MONTH_TTL') end
end

local result
if ms then
  result = 'ALLOWED|' .. string.format('%d|%d|', rem, total) .. ds .. '|' .. ms .. '|' .. throttle .. '|' .. crossed .. '|'
else
  result = decision .. '|' .. string.format('%d|%d|%d|%d|0|', rem, total, daily, monthly) .. crossed .. '|' .. rule
end
-- A bucket lives three windows from its first write (so at least two after
-- its last, on clocks less than a window apart): an id judged in bucket b is
-- found by any replay arriving within the window (in bucket b or b+1).
if bucket[2] then
  redis.call('HSET', KEYS[5], ARGV[8], result)
else
  redis.call('HSET', KEYS[5], ARGV[8], result, '', '1')
  redis.call('EXPIRE', KEYS[5], 'DPCS_BUCKET_TTL')
end
return {0, result}
