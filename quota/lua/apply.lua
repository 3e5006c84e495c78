-- DPCS quota engine: judge one usage event atomically.
-- Generation (quota.OnTouch) -> dedupe -> membership -> BLOCK:ACCESS -> app/category blocks (but an
-- EXCEPT:APP in effect) -> time windows (but EXCEPT:TIME in effect, ALLOW:APP / ALLOW:CATEGORY apps) ->
-- the app's, then its category's daily budget (but an EXCEPT:APP in effect) ->
-- DAILY then MONTHLY limit (raised by the day's and month's extras, the monthly one moved by the month's gifts)
-- -> family pool (less what grants reserve) -> deduct -> threshold crossings.
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
--                                                        d:<cid> ("DD:bytes", the member's latest day),
--                                                        r, r:<cid>, r:<cid>:<DD> (what grants reserve
--                                                        of the pool, the member's month and day; see grant.lua)
-- KEYS[4] family:{f}:customer:{c}:usage:{YYYYMM}   hash  d:<DD>, the member's days other than
--                                                        the slot's (m: the month, as an earlier
--                                                        engine kept it)
-- KEYS[5] family:{f}:evt:<b>                       hash  eventId -> stored result (dedupe), "" = 1
--                                                        once the bucket's TTL is set,
-- KEYS[6] family:{f}:evt:<b-1>                           by arrival: b = now / window
-- KEYS[7] family:{f}:customer:{c}:budget:{YYYYMMDD} hash a:<app>, c:<category>: the day's allowed
--                                                        bytes of each app and category with a daily budget
--                                                        (read and written only for a member with one)
-- ARGV: 1 customerId, 2 bytes, 3 appId, 4 category, 5 minute of day, 6 ISO weekday,
--       7 day "YYYYMMDD", 8 eventId, 9 state generation ("" = unchecked)
-- The parts shared with grant.lua (policy.lua, limits.lua, crossings.lua) are
-- written in where it says --[[name]], and the engine's constants when the
-- engine is made (quota.scriptSource; every argument costs the server a
-- string per call):
-- DPCS_BUCKET_TTL the dedupe bucket's TTL in s (two windows and a 24th), DPCS_MONTH_TTL
-- the month keys' TTL in s, DPCS_THRESHOLDS the default thresholds ("50,30,10"),
-- DPCS_MAX_TOTAL the largest pool total, DPCS_SHORT_RESULTS whether results are stored short.
-- Returns {duplicate 0|1, stored result}: "decision|remaining|total|daily|monthly|throttle|crossed|rule"
-- (long) or a decision's letter, "remaining|total|daily|monthly|throttle|crossed" and "|rule"
-- unless the decision implies it (short, DPCS_SHORT_RESULTS; see quota/stored.go),
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
local day, ck = ARGV[7], KEYS[2]
local dd = string.sub(day, 7, 8)
local uf, df = 'u:' .. ARGV[1], 'd:' .. ARGV[1]

local thr = fam[2] or 'DPCS_THRESHOLDS'
-- r: what the family's grants reserve of the month (absent: none), the
-- one field the event reads for them unless they hold some.
local pool = redis.call('HMGET', KEYS[3], 'used', 'topup', uf, df, 'q', 'r')
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
--[[policy.lua]]

-- Daily budgets (LIMIT:DATA:APP:<app>, LIMIT:DATA:CATEGORY:<c>; policy/budget.go),
-- read only when #c's second byte says the member has one ('2' or '3'; a hash
-- without #c was written by an engine that refused budgets): the app's, then
-- its category's budget blocks when the day's counted use + bytes is over it,
-- unless EXCEPT:APP:<app> lasts. bw: the budget hash's writes if allowed.
local bw = nil
if not decision and cc and string.byte(cc, 2) >= 50 then
  local x = redis.call('HMGET', ck, 'LIMIT:DATA:APP:' .. app, 'LIMIT:DATA:CATEGORY:' .. category, 'EXCEPT:APP:' .. app)
  local ab, cb = app ~= '' and x[1], category ~= '' and x[2]
  if ab or cb then
    local u = redis.call('HMGET', KEYS[7], 'a:' .. app, 'c:' .. category)
    local au, cu = tonumber(u[1]) or 0, tonumber(u[2]) or 0
    stamp = stamp or tonumber(day) * 10000 + math.floor(now / 60) * 100 + now % 60
    if app == '' or not x[3] or stamp >= tonumber(x[3]) then
      if ab and au + bytes > tonumber(ab) then
        decision, rule = 'BLOCKED_APP_LIMIT', 'LIMIT:DATA:APP:' .. app
      elseif cb and cu + bytes > tonumber(cb) then
        decision, rule = 'BLOCKED_APP_LIMIT', 'LIMIT:DATA:CATEGORY:' .. category
      end
    end
    bw = {}
    if ab then bw[1], bw[2] = 'a:' .. app, string.format('%d', au + bytes) end
    if cb then bw[#bw + 1], bw[#bw + 2] = 'c:' .. category, string.format('%d', cu + bytes) end
  end
end

if not decision then
  --[[limits.lua]]
  -- What the family's grants reserve (r) is not free; what the member's
  -- reserve of its month (r:<cid>) and day (r:<cid>:<DD>) counts against
  -- its limits (read only when it has one).
  local rp, rm, rd = 0, 0, 0
  if pool[6] then
    rp = tonumber(pool[6])
    if dl or ml then
      local x = redis.call('HMGET', KEYS[3], 'r:' .. ARGV[1], 'r:' .. ARGV[1] .. ':' .. dd)
      rm, rd = tonumber(x[1]) or 0, tonumber(x[2]) or 0
    end
  end
  local r = total - used - rp
  if r < 0 then r = 0 end
  if dl and daily + rd + bytes > dl then
    decision, rule = 'BLOCKED_LIMIT_DAILY', 'LIMIT:DATA:DAILY'
  elseif ml and monthly + rm + bytes > ml then
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
local crossed = ''
if decision ~= 'BLOCKED_NOT_MEMBER' and total > 0 then
  local q, pk = pool[5], KEYS[3]
  --[[crossings.lua]]
end
if bw and decision == 'ALLOWED' then
  -- The budget hash lives to the event's day's end and the late events
  -- of the dedupe window after it.
  redis.call('HSET', KEYS[7], unpack(bw))
  redis.call('EXPIRE', KEYS[7], (1440 - now) * 60 + DPCS_BUCKET_TTL)
end
if pw then
  -- TTLs are set when a period key is created; keys that exist have theirs.
  redis.call('HSET', KEYS[3], unpack(pw))
  if pool[1] == false and pool[2] == false then redis.call('EXPIRE', KEYS[3], 'DPCS_MONTH_TTL') end
end

-- The stored result, short unless the engine stores the long form (see
-- quota/stored.go): a decision's letter, and the rule only when it is not
-- the one the decision implies.
local result, code, implied = nil, nil, ''
if DPCS_SHORT_RESULTS then
  if ms then code = 'a'
  elseif decision == 'BLOCKED_FAMILY_QUOTA' then code, implied = 'q', 'POOL'
  elseif decision == 'BLOCKED_LIMIT_MONTHLY' then code, implied = 'o', 'LIMIT:DATA:MONTHLY'
  elseif decision == 'BLOCKED_LIMIT_DAILY' then code, implied = 'd', 'LIMIT:DATA:DAILY'
  elseif decision == 'BLOCKED_TIME' then code = 't'
  elseif decision == 'BLOCKED_APP' then code = 'p'
  elseif decision == 'BLOCKED_APP_LIMIT' then code = 'b'
  elseif decision == 'BLOCKED_ACCESS' then code, implied = 'x', 'BLOCK:ACCESS'
  elseif decision == 'BLOCKED_NOT_MEMBER' then code, implied = 'm', 'MEMBERSHIP'
  end
end
if code == 'a' then
  result = 'a' .. string.format('%d|%d|', rem, total) .. ds .. '|' .. ms .. '|' .. throttle .. '|' .. crossed
elseif code then
  result = code .. string.format('%d|%d|%d|%d|0|', rem, total, daily, monthly) .. crossed
  if rule ~= implied then result = result .. '|' .. rule end
elseif ms then
  result = 'ALLOWED|' .. string.format('%d|%d|', rem, total) .. ds .. '|' .. ms .. '|' .. throttle .. '|' .. crossed .. '|'
else
  result = decision .. '|' .. string.format('%d|%d|%d|%d|0|', rem, total, daily, monthly) .. crossed .. '|' .. rule
end
-- A bucket lives two windows and a 24th from its first write (so at least
-- one after its last, on clocks less than a 24th of a window apart): an id
-- judged in bucket b is found by any replay arriving within the window (in
-- bucket b or b+1).
if bucket[2] then
  redis.call('HSET', KEYS[5], ARGV[8], result)
else
  redis.call('HSET', KEYS[5], ARGV[8], result, '', '1')
  redis.call('EXPIRE', KEYS[5], 'DPCS_BUCKET_TTL')
end
return {0, result}
